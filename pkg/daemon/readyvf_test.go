package daemon

import (
	"context"
	"strings"
	"syscall"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// A VF that drifted onto another driver is bound back by prepare, and
// its drift is not remembered as its original driver: a VF goes with its
// PF's VFs, and an uncarve gives no driver back to it.
func TestPrepareRebindsDriftedVFForgettingItsDriver(t *testing.T) {
	r := startMixed(t)
	res, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 1})
	if err != nil || len(res.Allocations) != 1 {
		t.Fatalf("reserve = %+v, %v", res, err)
	}
	vf := pci.MustParseAddress(res.Allocations[0].VGPU)
	if err := pci.Bind(context.Background(), r.k, vf, simkernel.DrvPCIStub); err != nil {
		t.Fatal(err)
	}
	r.d.engine.HostChanged()
	if _, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "mi25-4g", VGPUs: []string{vf.String()}}); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if drv, _ := pci.CurrentDriver(r.k, vf); drv != "vfio-pci" {
		t.Fatalf("drifted VF on %q after prepare, want vfio-pci", drv)
	}
	if d, ok, err := r.d.engine.Ledger().OriginalDriver(vf); ok || err != nil {
		t.Errorf("the ledger remembers %q as VF %s's original driver (%v)", d, vf, err)
	}
}

// A swap whose create of the domain's identity fails puts the mdev it
// removed back, and the domain keeps its reservation of it.
func TestSwapFailureUndoesTheRemoval(t *testing.T) {
	r, carvedM := reservedMdev(t)
	create := sysfs.PCIDevices + "/0000:3b:00.0/mdev_supported_types/nvidia-232/create"
	r.k.InjectFault(simkernel.Fault{Path: create, Errno: syscall.ENOSPC})
	_, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "t4-4q", VGPUs: []string{mdevA0}})
	if err == nil || !strings.Contains(err.Error(), "undone") {
		t.Fatalf("prepare with the create failing = %v, want an error whose steps were undone", err)
	}
	if _, ok, _ := mdev.Get(r.k, mdevA0); ok {
		t.Errorf("mdev %s exists after the failed swap", mdevA0)
	}
	if in, ok, _ := mdev.Get(r.k, carvedM); !ok || in.Type != "nvidia-232" {
		t.Errorf("the reserved mdev %s is not back after the failed swap (%+v)", carvedM, in)
	}
	if a, ok, err := r.d.engine.Ledger().Allocation(carvedM); err != nil || !ok || a.DomainUUID != domA {
		t.Errorf("allocation of %s after the failed swap = %+v, %v, %v; want domain %s's", carvedM, a, ok, err, domA)
	}
}
