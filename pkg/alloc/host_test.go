package alloc

import (
	"context"
	"errors"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// TestOnSimulatedHost runs the whole path on the fake kernel: carve with
// the ledger as driver store, list the vGPUs, allocate on a NUMA node, and
// see the ledger's hold stop an uncarve.
func TestOnSimulatedHost(t *testing.T) {
	r := newRig(t)
	kern := simkernel.NewExample(t, "mixed.yaml")
	cat, err := profile.Load()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := carve.New(kern, cat, r.l, carve.WithUsage(r.l))
	mi25, l40s := pci.MustParseAddress("0000:03:00.0"), pci.MustParseAddress("0000:86:00.0")
	for addr, prof := range map[pci.Address]string{mi25: "mi25-4g", l40s: "l40s-12q"} {
		if _, err := c.Carve(ctx, vgpu.GPU(addr), prof, carve.Options{}); err != nil {
			t.Fatalf("carve %s on %s: %v", prof, addr, err)
		}
	}
	candidates := func() []Candidate {
		gpus, err := inventory.Discover(kern, nil)
		if err != nil {
			t.Fatal(err)
		}
		vgpus, err := carve.VGPUs(ctx, kern, gpus, cat, carve.VFIOUsage{FS: kern}, r.l)
		if err != nil {
			t.Fatal(err)
		}
		return Candidates(vgpus, gpus)
	}
	host := candidates()

	one := 1
	got, err := r.a.Allocate(ctx, Request{Profile: "l40s-12q", Count: 2, NUMANode: &one, DomainUUID: uuidN(0), DomainName: "gpu-vm"}, host)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range got {
		if a.GPU != l40s {
			t.Errorf("%s is on %s, want the L40S", a.VGPU, a.GPU)
		}
	}
	zero := 0
	_, err = r.a.Allocate(ctx, Request{Profile: "l40s-12q", Count: 1, NUMANode: &zero, DomainUUID: uuidN(1), DomainName: "x"}, host)
	if !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), "0000:86:00.0: 2 of 4 allocated, NUMA node 1") {
		t.Errorf("L40S on node 0: %v", err)
	}
	vm, err := r.a.Allocate(ctx, req(2, 1), host)
	if err != nil {
		t.Fatal(err)
	}

	// The listing shows the holds, and the allocator sees them as taken.
	var held int
	for _, v := range candidates() {
		if v.InUse {
			held++
			if v.ID == vm[0].VGPU && v.Holder != "reserved for domain vm2 ("+uuidN(2)+")" {
				t.Errorf("holder of %s = %q", v.ID, v.Holder)
			}
		}
	}
	if held != 3 {
		t.Errorf("%d vGPUs in use, want 3", held)
	}
	_, err = c.Uncarve(ctx, vgpu.GPU(mi25), carve.Options{})
	var inUse *carve.InUseError
	if !errors.As(err, &inUse) || len(inUse.Blocked) != 1 || inUse.Blocked[0].VGPU != vm[0].VGPU {
		t.Errorf("uncarve under an allocation: %v", err)
	}
	if _, err := r.a.ReleaseDomain(ctx, uuidN(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Uncarve(ctx, vgpu.GPU(mi25), carve.Options{}); err != nil {
		t.Errorf("uncarve after release: %v", err)
	}
}
