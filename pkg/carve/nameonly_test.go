package carve_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// A profile whose type the catalog gives by name only (as most of the
// vGPU 17+ boards') carves once the VFs list the type, with the id they
// list; before that the carve is refused and writes nothing.
func TestCarveNameOnlyType(t *testing.T) {
	ctx := context.Background()
	dir, cat, k := nameOnlyL40S(t)
	addr := gpuAddr["l40s"]
	rec := sysfstest.Record(k)
	c := carve.New(rec, cat, carve.NewFileDriverStore(filepath.Join(dir, "drivers.json")), carve.WithToolRetry(3, time.Millisecond))

	_, err := c.Carve(ctx, vgpu.GPU(addr), "site-l40s-12q", carve.Options{})
	if !errors.Is(err, profile.ErrCannotSplit) || !strings.Contains(err.Error(), "by name only") || !strings.Contains(err.Error(), "sriov-manage -e "+addr.String()) {
		t.Fatalf("Carve before the VFs exist = %v", err)
	}
	if ws := rec.Writes(); len(ws) != 0 {
		t.Fatalf("a refused carve wrote %+v", ws)
	}

	if err := sysfstest.EnableVFs(k, addr.String(), 0); err != nil { // the admin's sriov-manage -e
		t.Fatal(err)
	}
	want, ok := cat.Get("l40s-12q") // the built-in file has the id the fake driver lists
	if !ok {
		t.Fatal("no l40s-12q")
	}
	res, err := c.Carve(ctx, vgpu.GPU(addr), "site-l40s-12q", carve.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied == 0 {
		t.Fatal("the carve did nothing")
	}
	g, err := inventory.Get(k, nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	set := 0
	for _, vf := range g.SRIOV.VFs {
		if vf.NVIDIA != nil && vf.NVIDIA.CurrentType != 0 {
			set++
			if vf.NVIDIA.CurrentType != want.NVIDIA.ID {
				t.Errorf("VF %s has type %d, want the listed id %d", vf.Address, vf.NVIDIA.CurrentType, want.NVIDIA.ID)
			}
		}
	}
	if set != 4 {
		t.Errorf("%d VFs have a type, want 4", set)
	}
	// Its vGPUs fill the GPU, so no list shows the type now and its name
	// alone cannot tell what the VFs carry (docs/profiles.md): the GPU is
	// not taken for the name-only profile, only for one with the id.
	if carve.Carries(g, cat, "site-l40s-12q") {
		t.Error("a full GPU counts as carrying a type known by name only")
	}
	if got := carve.ProfileOf(g, cat); got != "l40s-12q" {
		t.Errorf("ProfileOf = %q, want the built-in l40s-12q, whose id the VFs carry", got)
	}
}

// nameOnlyL40S is an L40S host and the catalog with a site file giving
// site-l40s-12q's type by name only; dir holds the file.
func nameOnlyL40S(t *testing.T) (dir string, cat *profile.Catalog, k *simkernel.Kernel) {
	t.Helper()
	dir = t.TempDir()
	site := `version: v1
model: NVIDIA L40S
match: {vendor: 10de, devices: [26b9]}
dialect: nvidia-vf
framebuffer-mb: 49152
profiles:
  - name: site-l40s-12q
    split: 4
    nvidia-type: {name: NVIDIA L40S-12Q}
`
	if err := os.WriteFile(filepath.Join(dir, "site.yaml"), []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}
	cat, err := profile.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	k, err = simkernel.New(oneGPU("l40s", gpuAddr["l40s"]))
	if err != nil {
		t.Fatal(err)
	}
	return dir, cat, k
}
