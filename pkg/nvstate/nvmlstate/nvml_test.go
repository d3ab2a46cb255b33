//go:build cgo

package nvmlstate_test

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

var gpu = pci.MustParseAddress("0000:ca:00.0")

// newNVML is NVML on a simulated A100 at gpu.
func newNVML(t *testing.T) (*nvmlstate.NVML, *simnvml.Server) {
	t.Helper()
	return nvmlOf(t, simnvml.ModelA100PCIe40GB)
}

// nvmlOf is NVML on a simulated GPU of model at gpu.
func nvmlOf(t *testing.T, model string) (*nvmlstate.NVML, *simnvml.Server) {
	t.Helper()
	s, err := simnvml.New(simnvml.GPU{Model: model, BusID: gpu.String()})
	if err != nil {
		t.Fatal(err)
	}
	return nvmlstate.NewWith(s, "simnvml"), s
}

// allClosed fails the test unless every call closed its NVML session.
func allClosed(t *testing.T, s *simnvml.Server) {
	t.Helper()
	if n := s.Sessions(); n != 0 {
		t.Fatalf("%d NVML sessions left open", n)
	}
}

// TestNVMLInstances: profiles are named by their nvidia-smi ids (7g.40gb is
// 0, not NVML's index constant 4); every call closes its session.
func TestNVMLInstances(t *testing.T) {
	m, s := newNVML(t)
	if _, err := m.Create(gpu, 19, nil); err == nil || !strings.Contains(err.Error(), "MIG is off") {
		t.Fatalf("create with MIG off: %v", err)
	}
	if ins, err := m.Instances(gpu); err != nil || len(ins) != 0 {
		t.Fatalf("instances with MIG off: %v, %v", ins, err)
	}
	if err := m.SetMode(gpu, true); err != nil {
		t.Fatal(err)
	}
	if md, err := m.Mode(gpu); err != nil || md != (nvstate.Mode{Current: true, Pending: true}) {
		t.Fatalf("mode = %+v, %v", md, err)
	}
	full, err := m.Create(gpu, 0, nil)
	if err != nil || full.ProfileID != 0 || full.Size != 8 {
		t.Fatalf("7g.40gb = %+v, %v", full, err)
	}
	if _, err := m.Create(gpu, 19, nil); !errors.Is(err, nvstate.ErrNoRoom) {
		t.Fatalf("1g.5gb on a full GPU: %v", err)
	}
	if err := m.Destroy(gpu, full.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(gpu, full.ID); err != nil {
		t.Fatalf("destroy again: %v", err)
	}
	start := 4
	in, err := m.Create(gpu, 9, &start)
	if err != nil || in.Start != 4 || in.ProfileID != 9 {
		t.Fatalf("3g.20gb at 4 = %+v, %v", in, err)
	}
	if _, err := m.Create(gpu, 14, nil); err != nil {
		t.Fatal(err)
	}
	ins, err := m.Instances(gpu)
	if err != nil || len(ins) != 2 || ins[0].ID > ins[1].ID {
		t.Fatalf("instances = %+v, %v", ins, err)
	}
	if err := s.SetInstanceInUse(gpu.String(), in.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(gpu, in.ID); !errors.Is(err, nvstate.ErrInUse) {
		t.Fatalf("destroy in use: %v", err)
	}
	if err := m.SetMode(gpu, false); !errors.Is(err, nvstate.ErrInUse) {
		t.Fatalf("MIG off with instances: %v", err)
	}
	allClosed(t, s)
}

// TestNVMLPending: on a busy GPU MIG mode pends, and asking for the old
// mode withdraws it.
func TestNVMLPending(t *testing.T) {
	m, s := newNVML(t)
	if err := s.SetBusy(gpu.String(), true); err != nil {
		t.Fatal(err)
	}
	if err := m.SetMode(gpu, true); !errors.Is(err, nvstate.ErrPending) {
		t.Fatalf("err = %v", err)
	}
	if md, _ := m.Mode(gpu); md != (nvstate.Mode{Pending: true}) {
		t.Fatalf("mode = %+v", md)
	}
	if err := m.SetMode(gpu, false); err != nil {
		t.Fatal(err)
	}
	if md, _ := m.Mode(gpu); md != (nvstate.Mode{}) {
		t.Fatalf("mode = %+v", md)
	}
}

// TestNVMLMissingLibrary: the real go-nvml without its library gives one
// line naming the GPU and the library path.
func TestNVMLMissingLibrary(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	_, err := nvmlstate.New(lib).Mode(gpu)
	if !errors.Is(err, nvstate.ErrUnavailable) || !strings.Contains(err.Error(), gpu.String()) || !strings.Contains(err.Error(), lib) {
		t.Fatalf("err = %v", err)
	}
}

// TestNVMLMixedSize: mixed-size mode read and set through NVML's
// heterogeneous mode; NVML's refusals map to ErrInUse and ErrNotSupported.
func TestNVMLMixedSize(t *testing.T) {
	m, s := newNVML(t)
	if on, err := m.MixedSize(gpu); err != nil || on {
		t.Fatalf("at load: %v, %v", on, err)
	}
	if err := m.SetMixedSize(gpu, true); err != nil {
		t.Fatal(err)
	}
	if on, err := m.MixedSize(gpu); err != nil || !on {
		t.Fatalf("after set: %v, %v", on, err)
	}
	s.SetVGPUs(func(string) int { return 1 })
	if err := m.SetMixedSize(gpu, false); !errors.Is(err, nvstate.ErrInUse) || !strings.Contains(err.Error(), "GPU 0000:ca:00.0: turn mixed-size mode off") {
		t.Fatalf("with a vGPU: err = %v, want ErrInUse", err)
	}
	s.SetVGPUs(nil)
	if err := m.SetMode(gpu, true); err != nil {
		t.Fatal(err)
	}
	if _, err := m.MixedSize(gpu); !errors.Is(err, nvstate.ErrNotSupported) {
		t.Fatalf("with MIG on: err = %v, want ErrNotSupported", err)
	}
	if err := m.SetMixedSize(gpu, true); !errors.Is(err, nvstate.ErrNotSupported) {
		t.Fatalf("set with MIG on: err = %v, want ErrNotSupported", err)
	}
	allClosed(t, s)
}

// TestSizes: the memory total and every GPU instance profile as NVML states
// them, with MIG off (an H200 as the real one answered).
func TestSizes(t *testing.T) {
	m, s := nvmlOf(t, simnvml.ModelH200SXM141GB)
	sz, err := m.Sizes(gpu)
	if err != nil {
		t.Fatal(err)
	}
	want := nvstate.Sizes{TotalMB: 143771, Profiles: []nvstate.GIProfile{
		{ID: 19, MemoryMB: 16384, Slices: 1, Count: 7}, {ID: 14, MemoryMB: 33280, Slices: 2, Count: 3},
		{ID: 9, MemoryMB: 71424, Slices: 3, Count: 2}, {ID: 5, MemoryMB: 71424, Slices: 4, Count: 1},
		{ID: 0, MemoryMB: 143360, Slices: 7, Count: 1}, {ID: 20, MemoryMB: 16384, Slices: 1, Count: 1},
		{ID: 15, MemoryMB: 33280, Slices: 1, Count: 4},
	}}
	if !reflect.DeepEqual(sz, want) {
		t.Fatalf("sizes %+v\nwant  %+v", sz, want)
	}
	allClosed(t, s)
}

// TestNVMLVirtualization: the driver's word on the GPU, as NVML numbers
// it: the vGPU host driver, and a guest's, which has no host vGPU mode.
func TestNVMLVirtualization(t *testing.T) {
	m, s := newNVML(t)
	if v, err := m.Virtualization(gpu); err != nil || v != (nvstate.Virt{Mode: nvstate.VirtHostVGPU, HostVGPU: nvstate.HostVGPUSRIOV}) || v.Guest() {
		t.Errorf("vGPU host: %+v, %v", v, err)
	}
	s.SetDriver(simnvml.Driver{Guest: true})
	if v, err := m.Virtualization(gpu); err != nil || v != (nvstate.Virt{Mode: nvstate.VirtPassthrough}) || !v.Guest() {
		t.Errorf("guest: %+v, %v", v, err)
	}
	s.SetDriver(simnvml.Driver{Datacenter: true})
	if v, err := m.Virtualization(gpu); err != nil || v != (nvstate.Virt{Mode: nvstate.VirtNone}) {
		t.Errorf("datacenter on bare metal: %+v, %v", v, err)
	}
	if _, err := m.VGPUTypes(gpu); err == nil {
		t.Error("the datacenter driver listed vGPU types")
	}
}
