//go:build cgo

package carve_test

import (
	"testing"

	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
)

// nvRig is a rig with NVML (simnvml, on the rig's GPU), which the carver
// is to reach through pkg/nvstate's NVML code behind faultyMIG; how NVML
// joins the fake kernel is the caller's.
type nvRig struct {
	*rig
	nv  *simnvml.Server
	mgr *faultyMIG
}

// newNVRig gives rig r NVML of model nvModel on its GPU.
func newNVRig(t *testing.T, r *rig, nvModel string) *nvRig {
	t.Helper()
	nv, err := simnvml.New(simnvml.GPU{Model: nvModel, BusID: r.gpu.String()})
	if err != nil {
		t.Fatal(err)
	}
	return &nvRig{rig: r, nv: nv, mgr: &faultyMIG{Manager: nvmlstate.NewWith(nv, "simnvml")}}
}

// changeSteps makes the change to prof on n and returns the writes and
// the NVML changes it made, the places a fault-injection test fails in
// turn; a change without both is not one such a test can use.
func (n *nvRig) changeSteps(t *testing.T, prof string) (writes []sysfstest.Write, changes int) {
	t.Helper()
	writes = changeWrites(t, n.rig, prof, carve.Options{})
	if len(writes) == 0 || n.mgr.calls == 0 {
		t.Fatalf("the change made %d writes and %d NVML changes", len(writes), n.mgr.calls)
	}
	return writes, n.mgr.calls
}
