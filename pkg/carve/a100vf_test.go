package carve_test

import (
	"context"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// The A100 on a vGPU 17+ host takes time-sliced types per VF: a100-vf-20c
// enables every VF with sriov-manage and types the first two; a re-split
// retypes; uncarve leaves no VF. The pre-17 profile of the same split,
// a100-20c, makes mdevs that such a host has no parent for: refused and
// undone, the GPU as it was.
func TestA100PerVFTimeSliced(t *testing.T) {
	ctx := context.Background()
	addr := pci.MustParseAddress("0000:ca:00.0")
	r := newRigOn(t, oneGPU(simkernel.ModelA100VF, addr), addr)
	typed := func() map[int]int {
		t.Helper()
		g := r.gpuNow(t)
		n := map[int]int{}
		if g.SRIOV != nil {
			for _, vf := range g.SRIOV.VFs {
				if vf.NVIDIA != nil && vf.NVIDIA.CurrentType != 0 {
					n[vf.NVIDIA.CurrentType]++
				}
			}
		}
		return n
	}
	before := snapshot(t, r.k)
	if _, err := r.do(ctx, "a100-20c", carve.Options{}); err == nil {
		t.Fatal("the pre-17 mdev profile carved on a vGPU 17+ A100")
	}
	checkUnchanged(t, "the refused carve", before, snapshot(t, r.k))
	r.mustDo(t, "a100-vf-20c")
	if n := typed(); len(n) != 1 || n[472] != 2 {
		t.Fatalf("types after a100-vf-20c: %v, want 2 x 472", n)
	}
	if p := carve.ProfileOf(r.gpuNow(t), r.cat); p != "a100-vf-20c" {
		t.Fatalf("ProfileOf = %q, want a100-vf-20c", p)
	}
	r.mustDo(t, "a100-vf-10c")
	if n := typed(); len(n) != 1 || n[471] != 4 {
		t.Fatalf("types after a100-vf-10c: %v, want 4 x 471", n)
	}
	r.mustDo(t, "")
	if g := r.gpuNow(t); g.SRIOV != nil && g.SRIOV.NumVFs != 0 {
		t.Fatalf("%d VFs after uncarve", g.SRIOV.NumVFs)
	}
}

// A config that asks for a split rather than a profile name
// (profile.Catalog.ResolveSplit) gets, on an A100 whose VFs do not exist
// yet, the profile of the host driver's generation, and it carves: the
// per-VF one from R550 (vGPU 17) on, the mdev one before.
func TestA100SplitByHostDriver(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		model, driver, want string
	}{
		{simkernel.ModelA100VF, "550.54.10", "a100-vf-20c"},
		{simkernel.ModelA100VF, "580.65.05", "a100-vf-20c"},
		{simkernel.ModelA100, "535.230.02", "a100-20c"},
	} {
		addr := pci.MustParseAddress("0000:ca:00.0")
		r := newRigOn(t, simkernel.Host{Version: "v1", NVIDIADriver: c.driver,
			GPUs: []simkernel.HostGPU{{Model: c.model, Address: addr}}}, addr)
		pl, err := r.cat.ResolveSplit(2, r.gpuNow(t))
		if err != nil || pl.Profile != c.want {
			t.Errorf("%s on %s: ResolveSplit(2) = %q, %v, want %s", c.model, c.driver, pl.Profile, err, c.want)
			continue
		}
		if _, err := r.do(ctx, pl.Profile, carve.Options{}); err != nil {
			t.Errorf("%s on %s: carve %s: %v", c.model, c.driver, pl.Profile, err)
			continue
		}
		if p := carve.ProfileOf(r.gpuNow(t), r.cat); p != c.want {
			t.Errorf("%s on %s: ProfileOf after the carve = %q, want %s", c.model, c.driver, p, c.want)
		}
	}
}
