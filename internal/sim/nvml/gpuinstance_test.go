package simnvml

import (
	"reflect"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
)

func TestDestroyInUse(t *testing.T) {
	s, d := newMIG(t, ModelA100PCIe40GB)
	gi, _ := d.CreateGpuInstance(info(t, d, p2g10))
	in, _ := gi.GetInfo()
	if err := s.SetInstanceInUse(bus, int(in.Id), true); err != nil {
		t.Fatal(err)
	}
	if r := gi.Destroy(); r != nvml.ERROR_IN_USE {
		t.Fatalf("Destroy while in use: %v", r)
	}
	s.SetInstanceInUse(bus, int(in.Id), false)
	if r := gi.Destroy(); r != nvml.SUCCESS {
		t.Fatalf("Destroy: %v", r)
	}
}

// nvml.h: a destroyed instance's handle is invalid, even once a new
// instance gets the same ID.
func TestHandleInvalidAfterDestroy(t *testing.T) {
	_, d := newMIG(t, ModelA100PCIe40GB)
	p := info(t, d, p7g40)
	old, _ := d.CreateGpuInstance(p)
	if r := old.Destroy(); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	if _, r := old.GetInfo(); r != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GetInfo on a destroyed instance: %v", r)
	}
	if r := old.Destroy(); r != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("second Destroy: %v", r)
	}
	fresh, _ := d.CreateGpuInstance(p)
	if r := old.Destroy(); r != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("old handle destroyed the new instance: %v", r)
	}
	if got := placed(t, fresh); got != "0@0:8" {
		t.Errorf("new instance %s", got)
	}
}

func TestLookup(t *testing.T) {
	_, d := newMIG(t, ModelA100PCIe40GB)
	p19, p14 := info(t, d, p1g5), info(t, d, p2g10)
	run(t, d, []step{
		createAt(p1g5, 6, nvml.SUCCESS, ""), createAt(p1g5, 0, nvml.SUCCESS, ""), createAt(p2g10, 2, nvml.SUCCESS, ""),
	})
	gis, r := d.GetGpuInstances(p19)
	if r != nvml.SUCCESS || len(gis) != 2 || placed(t, gis[0]) != "7@0:1" || placed(t, gis[1]) != "13@6:1" {
		t.Fatalf("GetGpuInstances(1g.5gb) = %d instances, %v", len(gis), r)
	}
	if gis, _ := d.GetGpuInstances(p14); len(gis) != 1 {
		t.Errorf("GetGpuInstances(2g.10gb) = %d instances", len(gis))
	}
	if gis, r := d.GetGpuInstances(info(t, d, p3g20)); r != nvml.SUCCESS || len(gis) != 0 {
		t.Errorf("GetGpuInstances(3g.20gb) = %d, %v", len(gis), r)
	}
	// go-nvml sizes its buffer from InstanceCount; zero is invalid there.
	if _, r := d.GetGpuInstances(&nvml.GpuInstanceProfileInfo{Id: p1g5}); r != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GetGpuInstances without InstanceCount: %v", r)
	}
	gi, r := d.GetGpuInstanceById(4)
	if r != nvml.SUCCESS {
		t.Fatal(r)
	}
	in, _ := gi.GetInfo()
	if in.ProfileId != p2g10 || in.Placement != (nvml.GpuInstancePlacement{Start: 2, Size: 2}) {
		t.Errorf("GetInfo = %+v", in)
	}
	if _, r := d.GetGpuInstanceById(5); r != nvml.ERROR_NOT_FOUND {
		t.Errorf("GetGpuInstanceById(5): %v", r)
	}
	if _, r := d.GetGpuInstanceById(-1); r != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GetGpuInstanceById(-1): %v", r)
	}
}

func TestInstances(t *testing.T) {
	s, d := newMIG(t, ModelA100PCIe40GB)
	run(t, d, []step{create(p4g20, nvml.SUCCESS, ""), create(p1g5, nvml.SUCCESS, "")})
	s.SetInstanceInUse(bus, 1, true)
	want := []Instance{
		{ID: 1, ProfileID: 5, ProfileIndex: nvml.GPU_INSTANCE_PROFILE_4_SLICE, Profile: "4g.20gb", Start: 0, Size: 4, MemorySizeMB: 19968, InUse: true},
		{ID: 13, ProfileID: 19, ProfileIndex: nvml.GPU_INSTANCE_PROFILE_1_SLICE, Profile: "1g.5gb", Start: 6, Size: 1, MemorySizeMB: 4864},
	}
	// Both address forms name the same GPU.
	for _, b := range []string{bus, "00000000:3B:00.0"} {
		if got := s.Instances(b); !reflect.DeepEqual(got, want) {
			t.Errorf("Instances(%q) = %+v\nwant %+v", b, got, want)
		}
	}
}

// sriov-manage rebinds the driver, which destroys every GPU instance, used
// or not (docs/vendors/nvidia.md, "MIG-backed vGPU"). MIG mode survives.
func TestDriverRebindWipes(t *testing.T) {
	s, d := newMIG(t, ModelA100PCIe40GB)
	p := info(t, d, p1g5)
	var gis []nvmlstate.GpuInstance
	for range 7 {
		gi, r := d.CreateGpuInstance(p)
		if r != nvml.SUCCESS {
			t.Fatal(r)
		}
		gis = append(gis, gi)
	}
	s.SetInstanceInUse(bus, 7, true)
	if err := s.DriverRebind("00000000:3B:00.0"); err != nil {
		t.Fatal(err)
	}
	if got := s.Instances(bus); len(got) != 0 {
		t.Fatalf("instances after rebind: %+v", got)
	}
	for _, gi := range gis {
		if _, r := gi.GetInfo(); r != nvml.ERROR_INVALID_ARGUMENT {
			t.Fatalf("handle survived the rebind: %v", r)
		}
	}
	wantMode(t, d, on, on)
	if n, _ := d.GetGpuInstanceRemainingCapacity(p); n != 7 {
		t.Fatalf("remaining after rebind %d, want 7", n)
	}
	// And the GPU is fully usable again.
	if _, r := d.CreateGpuInstance(info(t, d, p7g40)); r != nvml.SUCCESS {
		t.Fatalf("7g after rebind: %v", r)
	}
}
