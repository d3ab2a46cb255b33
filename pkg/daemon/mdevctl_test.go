package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/mdevctl/mdevctltest"
)

const mdevctlT4 = "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44"

// TestMdevctlAutoRefused: a config that manages a GPU mdevctl starts mdevs
// on is refused wherever vgpud would take it in force (start, apply,
// reload) or compare with it (assert), and so is a carve of that GPU; each
// says which definitions and how to move them over. Nothing is carved
// meanwhile, on that GPU or any other of the config. With the definition
// made manual the same config is applied.
func TestMdevctlAutoRefused(t *testing.T) {
	def := filepath.Join("0000:3b:00.0", mdevctlT4)
	dir := mdevctltest.Dir(t, map[string][]byte{def: mdevctltest.Fixture(t, "debian-define/"+mdevctlT4)})
	r := newRig(t, simkernel.NewExample(t, "mixed.yaml"), cfgMixed)
	r.mdevctlDir = dir
	r.run()
	line := r.cfgPath + ":5: gpus[1]: mdevctl starts mdevs on 0000:3b:00.0 when it appears (start auto in " +
		filepath.Join(dir, "0000:3b:00.0") + ": " + mdevctlT4 + ")"

	if vs, err := r.c.VGPUs(bg); err != nil || len(vs) != 0 {
		t.Fatalf("vGPUs after a refused start: %v, %v", vs, err)
	}
	h, err := r.c.Health(bg)
	if err != nil || h.Drift == 0 {
		t.Fatalf("health after a refused start: %+v, %v", h, err)
	}
	rep, err := r.c.Reconcile(bg)
	if err != nil || !strings.HasPrefix(rep.Error, line) || len(rep.GPUs) != 0 {
		t.Fatalf("reconcile: %+v, %v; want refused with\n%s", rep, err, line)
	}
	if a, err := r.c.Assert(bg, nil); err != nil || !strings.HasPrefix(a.Error, line) {
		t.Fatalf("assert: %+v, %v", a, err)
	}
	_, err = r.c.ApplyFile(bg, "new.yaml", []byte(cfgMixed), false)
	if !errors.Is(err, client.ErrBadRequest) || !strings.Contains(err.Error(), "new.yaml:5: gpus[1]: mdevctl starts mdevs on 0000:3b:00.0") {
		t.Fatalf("apply: %v", err)
	}
	if _, err := r.d.Reload(bg); err == nil || !strings.Contains(err.Error(), line) {
		t.Fatalf("reload: %v", err)
	}
	_, err = r.c.Carve(bg, api.CarveRequest{GPU: "0000:3b:00.0", Profile: "t4-2q"})
	if !errors.Is(err, client.ErrBadRequest) || !strings.Contains(err.Error(), "mdevctl starts mdevs on 0000:3b:00.0") {
		t.Fatalf("carve of the T4: %v", err)
	}
	if _, err := r.c.Carve(bg, api.CarveRequest{GPU: "0000:03:00.0", Profile: "mi25-4g"}); err != nil {
		t.Fatalf("carve of the MI25, which mdevctl does not fill: %v", err)
	}

	manual := strings.Replace(string(mdevctltest.Fixture(t, "debian-define/"+mdevctlT4)), `"auto"`, `"manual"`, 1)
	if err := os.WriteFile(filepath.Join(dir, def), []byte(manual), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err = r.c.Reconcile(bg)
	if err != nil || !rep.OK() || len(rep.GPUs) != 3 {
		t.Fatalf("reconcile with the definition manual: %+v, %v", rep, err)
	}
}
