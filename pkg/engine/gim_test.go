package engine

import (
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// A config that gives both old-GIM S7150s one profile is kept by reconcile
// through re-splits: the first GPU's gim reload takes the second's free VFs
// off vfio-pci, and the second's own carve rebinds them.
func TestReconcileGIMResplit(t *testing.T) {
	r := newEngineRig(t, "s7150x2.yaml", "version: v1\ngpus:\n  - all: true\n    profile: s7150-2g\n")
	gpus := []pci.Address{pci.MustParseAddress("0000:3d:00.0"), pci.MustParseAddress("0000:3e:00.0")}
	carries := func(want string) {
		t.Helper()
		for _, a := range gpus {
			g, err := inventory.Get(r.k, nil, a)
			if err != nil {
				t.Fatal(err)
			}
			if got := carve.ProfileOf(g, r.e.catalog); got != want {
				t.Fatalf("%s carries %q, want %q", a, got, want)
			}
		}
	}
	carries("s7150-2g")
	for _, prof := range []string{"s7150-1g", "s7150-2g-liquid"} {
		cfg, err := config.Parse("test.yaml", []byte("version: v1\ngpus:\n  - all: true\n    profile: "+prof+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		r.e.SetConfig(cfg)
		if rep := r.e.Reconcile(bg, "test"); !rep.OK() {
			t.Fatalf("reconcile to %s: %+v", prof, rep)
		}
		carries(prof)
	}
}

// New GIM does not save a VF count amd-smi sets: after a reboot gim makes
// its file's count again, and vgpud's start sets the config's once more.
func TestStartReappliesNewGIMCount(t *testing.T) {
	r := newEngineRig(t, "mi300x.yaml", "version: v1\ngpus:\n  - all: true\n    profile: mi300x-24g\n")
	gpu := pci.MustParseAddress("0000:05:00.0")
	carries := func(k *simkernel.Kernel) string {
		t.Helper()
		g, err := inventory.Get(k, nil, gpu)
		if err != nil {
			t.Fatal(err)
		}
		return carve.ProfileOf(g, r.e.catalog)
	}
	if got := carries(r.k); got != "mi300x-24g" {
		t.Fatalf("after the first start the GPU carries %q", got)
	}
	// A reboot: the kernel comes up with /etc/gim_config as GIM left it.
	host := r.k.Host()
	host.Files = map[string]string{"/etc/gim_config": r.k.GIMConfig()}
	k2, err := simkernel.New(host)
	if err != nil {
		t.Fatal(err)
	}
	if got := carries(k2); got == "mi300x-24g" {
		t.Fatal("the rebooted kernel already has 8 VFs; the test shows nothing")
	}
	r.k = k2
	r.restart()
	if rep := r.e.Start(bg); !rep.OK() {
		t.Fatalf("start after the reboot: %+v", rep)
	}
	if got := carries(k2); got != "mi300x-24g" {
		t.Fatalf("after the start the GPU carries %q, want mi300x-24g", got)
	}
}
