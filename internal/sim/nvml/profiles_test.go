package simnvml

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// hwProfile is one row of NVIDIA's published numbers, typed in from the
// sources, not from models.go: the MIG user guide's "Supported MIG
// Profiles" tables (instances available, SM fraction) and its -lgipp
// output (placements), and for A30 a published nvidia-smi session.
type hwProfile struct {
	index      int
	id         uint32
	slices     uint32 // SM slices
	instances  int    // "Number of Instances Available"
	placements string // nvidia-smi mig -lgipp
}

// sevenSlice is the table of the 7-slice GPUs, the same on the A100 40GB,
// H100 80GB and H200 141GB: only the memory in the profile names differs
// (commented in that order).
var sevenSlice = []hwProfile{
	{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 7, "{0,1,2,3,4,5,6}:1"},      // 1g.5gb, 1g.10gb, 1g.18gb
	{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1, 1, "{0,1,2,3,4,5,6}:1"}, // 1g.5gb+me, 1g.10gb+me, 1g.18gb+me
	{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 4, "{0,2,4,6}:2"},       // 1g.10gb, 1g.20gb, 1g.35gb
	{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 3, "{0,2,4}:2"},              // 2g.10gb, 2g.20gb, 2g.35gb
	{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 2, "{0,4}:4"},                 // 3g.20gb, 3g.40gb, 3g.71gb
	{nvml.GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 1, "{0}:4"},                   // 4g.20gb, 4g.40gb, 4g.71gb
	{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 1, "{0}:8"},                   // 7g.40gb, 7g.80gb, 7g.141gb
}

var hardware = map[string][]hwProfile{
	ModelA100PCIe40GB: sevenSlice,
	ModelH100PCIe80GB: sevenSlice,
	// As NVML answered on a real H200 SXM 141GB (driver 580.159.04).
	ModelH200SXM141GB: sevenSlice,
	ModelA30PCIe24GB: {
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 14, 1, 4, "{0,1,2,3}:1"},      // 1g.6gb
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 21, 1, 1, "{0,1,2,3}:1"}, // 1g.6gb+me
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 5, 2, 2, "{0,2}:2"},           // 2g.12gb
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, 6, 2, 1, "{0,2}:2"},      // 2g.12gb+me
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE, 0, 4, 1, "{0}:4"},             // 4g.24gb
	},
}

func TestProfileInfo(t *testing.T) {
	for model, rows := range hardware {
		t.Run(model, func(t *testing.T) {
			_, d := newMIG(t, model)
			have := map[int]bool{}
			for _, hw := range rows {
				have[hw.index] = true
				p, r := d.GetGpuInstanceProfileInfo(hw.index)
				if r != nvml.SUCCESS {
					t.Fatalf("index %d: %v", hw.index, r)
				}
				if p.Id != hw.id || p.SliceCount != hw.slices || int(p.InstanceCount) != hw.instances {
					t.Errorf("index %d: Id %d SliceCount %d InstanceCount %d, want %d %d %d",
						hw.index, p.Id, p.SliceCount, p.InstanceCount, hw.id, hw.slices, hw.instances)
				}
				pls, r := d.GetGpuInstancePossiblePlacements(&p)
				if r != nvml.SUCCESS || lgipp(pls) != hw.placements {
					t.Errorf("profile %d placements %s (%v), want %s", hw.id, lgipp(pls), r, hw.placements)
				}
			}
			// Every other index constant is one this GPU lacks; past the
			// last one the argument itself is invalid (nvml.h's enumeration
			// contract).
			for i := range driverProfileCount {
				if _, r := d.GetGpuInstanceProfileInfo(i); !have[i] && r != nvml.ERROR_NOT_SUPPORTED {
					t.Errorf("index %d: %v, want NOT_SUPPORTED", i, r)
				}
			}
			for _, i := range []int{-1, driverProfileCount, nvml.GPU_INSTANCE_PROFILE_COUNT} {
				if _, r := d.GetGpuInstanceProfileInfo(i); r != nvml.ERROR_INVALID_ARGUMENT {
					t.Errorf("index %d: %v, want INVALID_ARGUMENT", i, r)
				}
			}
		})
	}
}

// The brief that motivated this package: go-nvml's mock answers Id 4 for
// the 7-slice profile; NVML answers 0.
func TestProfileIDIsNotIndex(t *testing.T) {
	_, d := newMIG(t, ModelA100PCIe40GB)
	p, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_7_SLICE)
	if nvml.GPU_INSTANCE_PROFILE_7_SLICE != 4 || p.Id != 0 {
		t.Fatalf("7-slice: index %d Id %d, want index 4 Id 0", nvml.GPU_INSTANCE_PROFILE_7_SLICE, p.Id)
	}
}

// With MIG off NVML still describes the profiles (info, placements,
// capacity), as a real H200 did; only instances need MIG on.
func TestInstancesNeedMIG(t *testing.T) {
	_, d := newGPU(t, ModelA100PCIe40GB)
	if p, r := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE); r != nvml.SUCCESS || p.Id != 19 {
		t.Errorf("GetGpuInstanceProfileInfo with MIG off: %+v, %v", p, r)
	}
	p := &nvml.GpuInstanceProfileInfo{Id: 19, InstanceCount: 7}
	if _, r := d.CreateGpuInstance(p); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("CreateGpuInstance with MIG off: %v", r)
	}
	if _, r := d.GetGpuInstances(p); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GetGpuInstances with MIG off: %v", r)
	}
	if _, r := d.GetGpuInstanceById(7); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GetGpuInstanceById with MIG off: %v", r)
	}
	if n, r := d.GetGpuInstanceRemainingCapacity(p); r != nvml.SUCCESS || n != 7 {
		t.Errorf("GetGpuInstanceRemainingCapacity with MIG off: %d, %v; want all 7", n, r)
	}
	// nvml.h: placements are listed "regardless of whether MIG is enabled".
	if pls, r := d.GetGpuInstancePossiblePlacements(p); r != nvml.SUCCESS || lgipp(pls) != "{0,1,2,3,4,5,6}:1" {
		t.Errorf("GetGpuInstancePossiblePlacements with MIG off: %s, %v", lgipp(pls), r)
	}
}

// The H200 SXM with MIG off answers as the real one did (driver 580.159.04,
// MIG off, 2026-11-26): every index in turn, with memory and engines as
// nvidia-smi mig -lgip showed them, and a memory total below 141 GB.
func TestH200AsMeasured(t *testing.T) {
	_, d := newGPU(t, ModelH200SXM141GB)
	if cur, pend, r := d.GetMigMode(); r != nvml.SUCCESS || cur != nvml.DEVICE_MIG_DISABLE || pend != nvml.DEVICE_MIG_DISABLE {
		t.Fatalf("MIG mode %d/%d %v, want off", cur, pend, r)
	}
	type row struct {
		id, mem, slices, count, sm, ce, dec, jpg, ofa int
		placements                                    string
	}
	want := map[int]row{
		0: {19, 16384, 1, 7, 16, 1, 1, 1, 0, "{0,1,2,3,4,5,6}:1"},
		7: {20, 16384, 1, 1, 16, 1, 1, 1, 1, "{0,1,2,3,4,5,6}:1"},
		9: {15, 33280, 1, 4, 26, 1, 1, 1, 0, "{0,2,4,6}:2"},
		1: {14, 33280, 2, 3, 32, 2, 2, 2, 0, "{0,2,4}:2"},
		2: {9, 71424, 3, 2, 60, 3, 3, 3, 0, "{0,4}:4"},
		3: {5, 71424, 4, 1, 64, 4, 4, 4, 0, "{0}:4"},
		4: {0, 143360, 7, 1, 132, 8, 7, 7, 1, "{0}:8"},
	}
	for i := 0; i <= 17; i++ {
		p, r := d.GetGpuInstanceProfileInfo(i)
		w, ok := want[i]
		switch {
		case i == 17:
			if r != nvml.ERROR_INVALID_ARGUMENT {
				t.Errorf("index 17: %v, want INVALID_ARGUMENT", r)
			}
			continue
		case !ok:
			if r != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("index %d: %v, want NOT_SUPPORTED", i, r)
			}
			continue
		case r != nvml.SUCCESS:
			t.Errorf("index %d: %v, want SUCCESS with MIG off", i, r)
			continue
		}
		got := row{int(p.Id), int(p.MemorySizeMB), int(p.SliceCount), int(p.InstanceCount), int(p.MultiprocessorCount),
			int(p.CopyEngineCount), int(p.DecoderCount), int(p.JpegCount), int(p.OfaCount), ""}
		pls, r := d.GetGpuInstancePossiblePlacements(&p)
		if r != nvml.SUCCESS {
			t.Errorf("index %d placements: %v", i, r)
		}
		got.placements = lgipp(pls)
		if got != w {
			t.Errorf("index %d: %+v, want %+v", i, got, w)
		}
		if p.EncoderCount != 0 {
			t.Errorf("index %d: %d encoders, want 0", i, p.EncoderCount)
		}
		if n, r := d.GetGpuInstanceRemainingCapacity(&p); r != nvml.SUCCESS || n != w.count {
			t.Errorf("index %d capacity with MIG off: %d, %v; want %d", i, n, r, w.count)
		}
	}
	mem, r := d.GetMemoryInfo()
	if r != nvml.SUCCESS || mem.Total != 143771<<20 {
		t.Errorf("memory total %d MiB, %v; want 143771 (below the nominal 144384)", mem.Total>>20, r)
	}
	if name, _ := d.GetName(); name != "NVIDIA H200" {
		t.Errorf("name %q", name)
	}
}

// Each profile alone, created until the GPU refuses: the count is the
// guide's "Number of Instances Available", and the refusal is
// INSUFFICIENT_RESOURCES.
func TestCapacityAlone(t *testing.T) {
	for model, rows := range hardware {
		for _, hw := range rows {
			_, d := newMIG(t, model)
			p := info(t, d, hw.id)
			if n, r := d.GetGpuInstanceRemainingCapacity(p); r != nvml.SUCCESS || n != hw.instances {
				t.Errorf("%s profile %d: remaining %d (%v) on an empty GPU, want %d", model, hw.id, n, r, hw.instances)
			}
			made := 0
			for {
				_, r := d.CreateGpuInstance(p)
				if r != nvml.SUCCESS {
					if r != nvml.ERROR_INSUFFICIENT_RESOURCES {
						t.Errorf("%s profile %d: refusal %v, want INSUFFICIENT_RESOURCES", model, hw.id, r)
					}
					break
				}
				made++
				if made > 8 {
					break
				}
			}
			if made != hw.instances {
				t.Errorf("%s profile %d: %d instances fit, want %d", model, hw.id, made, hw.instances)
			}
			if n, _ := d.GetGpuInstanceRemainingCapacity(p); n != 0 {
				t.Errorf("%s profile %d: remaining %d when full", model, hw.id, n)
			}
		}
	}
}
