package simnvml

import (
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
)

const bus = "0000:3b:00.0"

// newGPU returns an initialised Server with one GPU at bus and its handle.
func newGPU(t *testing.T, model string) (*Server, *Device) {
	t.Helper()
	s, err := New(GPU{Model: model, BusID: bus})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Init(); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	d, r := s.DeviceGetHandleByIndex(0)
	if r != nvml.SUCCESS {
		t.Fatal(r)
	}
	return s, d
}

// newMIG is newGPU with MIG mode enabled.
func newMIG(t *testing.T, model string) (*Server, *Device) {
	t.Helper()
	s, d := newGPU(t, model)
	if act, r := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); r != nvml.SUCCESS || act != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v, activation %v", r, act)
	}
	return s, d
}

// info asks for a profile by its real ID, as a caller that only knows
// nvidia-smi's IDs would after enumerating the index constants.
func info(t *testing.T, d *Device, id uint32) *nvml.GpuInstanceProfileInfo {
	t.Helper()
	for i := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		p, r := d.GetGpuInstanceProfileInfo(i)
		if r == nvml.SUCCESS && p.Id == id {
			return &p
		}
	}
	t.Fatalf("no profile ID %d", id)
	return nil
}

// placed reads back where an instance landed as "id@start:size".
func placed(t *testing.T, gi nvmlstate.GpuInstance) string {
	t.Helper()
	in, r := gi.GetInfo()
	if r != nvml.SUCCESS {
		t.Fatal(r)
	}
	return fmt.Sprintf("%d@%d:%d", in.Id, in.Placement.Start, in.Placement.Size)
}

// lgipp renders possible placements as nvidia-smi mig -lgipp does, so the
// tests compare with the guide's output verbatim.
func lgipp(pls []nvml.GpuInstancePlacement) string {
	starts := make([]string, len(pls))
	for i, p := range pls {
		starts[i] = fmt.Sprint(p.Start)
	}
	size := uint32(0)
	if len(pls) > 0 {
		size = pls[0].Size
	}
	return fmt.Sprintf("{%s}:%d", strings.Join(starts, ","), size)
}
