package daemon

import (
	"context"
	"testing"

	"github.com/vgpu-project/vgpu/internal/simkernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// A VF that drifted onto another driver is bound back by prepare, and
// its drift is not remembered as its original driver: a VF goes with its
// PF's VFs, and an uncarve gives no driver back to it.
func TestPrepareRebindsDriftedVFForgettingItsDriver(t *testing.T) {
	r := start(t, newKernel(t, "mixed.yaml"), cfgMixed)
	res, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 1})
	if err != nil || len(res.Allocations) != 1 {
		t.Fatalf("reserve = %+v, %v", res, err)
	}
	vf := pci.MustParseAddress(res.Allocations[0].VGPU)
	if err := pci.Bind(context.Background(), r.k, vf, simkernel.DrvPCIStub); err != nil {
		t.Fatal(err)
	}
	r.d.engine.invalidate()
	if _, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "mi25-4g", VGPUs: []string{vf.String()}}); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if drv, _ := pci.CurrentDriver(r.k, vf); drv != "vfio-pci" {
		t.Fatalf("drifted VF on %q after prepare, want vfio-pci", drv)
	}
	if d, ok, err := r.d.engine.ledger.OriginalDriver(vf); ok || err != nil {
		t.Errorf("the ledger remembers %q as VF %s's original driver (%v)", d, vf, err)
	}
}
