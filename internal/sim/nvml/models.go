package simnvml

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
)

// Model names accepted in GPU.Model.
const (
	ModelA100PCIe40GB = "A100-PCIE-40GB"
	ModelH100PCIe80GB = "H100-PCIE-80GB"
	ModelA30PCIe24GB  = "A30-PCIE-24GB"
	// ModelH200SXM141GB is as NVML answered on a real one (driver
	// 580.159.04, 2026-11-26): see lookupModel.
	ModelH200SXM141GB = "H200-SXM-141GB"
	// GPUs without MIG, for the vGPU scheduler.
	ModelT4   = "Tesla-T4"
	ModelL40S = "L40S"
)

// Models lists the model names New accepts.
func Models() []string {
	return []string{ModelA100PCIe40GB, ModelH100PCIe80GB, ModelH200SXM141GB, ModelA30PCIe24GB, ModelT4, ModelL40S}
}

// profile is one GPU instance profile as NVML reports it, plus where it may
// be placed. Engine counts feed the media-engine budget (see mediaFits).
type profile struct {
	index  int    // nvml.GPU_INSTANCE_PROFILE_* constant
	id     uint32 // profile ID, as in nvidia-smi mig -lgip
	name   string // "1g.5gb"
	slices uint32 // SM slices (SliceCount)
	count  uint32 // InstanceCount
	memMB  uint64
	sms    uint32
	ces    uint32
	decs   uint32
	jpegs  uint32
	ofas   uint32
	size   uint32   // memory slices one instance occupies
	starts []uint32 // valid first memory slices, as nvidia-smi mig -lgipp
}

func (p profile) info() nvml.GpuInstanceProfileInfo {
	return nvml.GpuInstanceProfileInfo{
		Id:                  p.id,
		SliceCount:          p.slices,
		InstanceCount:       p.count,
		MultiprocessorCount: p.sms,
		CopyEngineCount:     p.ces,
		DecoderCount:        p.decs,
		JpegCount:           p.jpegs,
		OfaCount:            p.ofas,
		MemorySizeMB:        p.memMB,
	}
}

// model is one GPU product.
type model struct {
	name      string // nvmlDeviceGetName
	pciID     uint32 // device<<16 | vendor, as nvmlPciInfo_t.pciDeviceId
	memMB     uint64
	memSlices uint32
	profiles  []profile
	vgpuTypes []VgpuType // time-sliced types NVML supports (none listed: NOT_SUPPORTED)
	// mixedSize: the GPU has vGPU heterogeneous (mixed-size) mode. NVIDIA
	// supports it "on Volta and later GPUs" (NVIDIA AI Enterprise 8,
	// Heterogeneous vGPU), which every model here is.
	mixedSize bool
}

// lookupModel returns a fresh copy of a model's tables, so no caller can
// change another's.
//
// Profile IDs, instance counts, engine counts and placements come from the
// MIG user guide's "Supported MIG Profiles" tables and its nvidia-smi mig
// -lgip/-lgipp examples; see the package doc for the URLs and for which
// numbers come from elsewhere.
func lookupModel(name string) (model, bool) {
	eighths := []uint32{0, 1, 2, 3, 4, 5, 6} // -lgipp offers no 1-slice start at 7
	quarters := []uint32{0, 2, 4, 6}
	switch name {
	case ModelA100PCIe40GB:
		return model{
			name:      "NVIDIA A100-PCIE-40GB",
			mixedSize: true,
			pciID:     0x20F110DE,
			memMB:     40960,
			memSlices: 8,
			profiles: []profile{
				{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE, id: 19, name: "1g.5gb", slices: 1, count: 7, memMB: 4864, sms: 14, ces: 1, size: 1, starts: eighths},
				{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, id: 20, name: "1g.5gb+me", slices: 1, count: 1, memMB: 4864, sms: 14, ces: 1, decs: 1, jpegs: 1, ofas: 1, size: 1, starts: eighths},
				{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, id: 15, name: "1g.10gb", slices: 1, count: 4, memMB: 9856, sms: 14, ces: 1, decs: 1, size: 2, starts: quarters},
				{index: nvml.GPU_INSTANCE_PROFILE_2_SLICE, id: 14, name: "2g.10gb", slices: 2, count: 3, memMB: 9856, sms: 28, ces: 2, decs: 1, size: 2, starts: []uint32{0, 2, 4}},
				{index: nvml.GPU_INSTANCE_PROFILE_3_SLICE, id: 9, name: "3g.20gb", slices: 3, count: 2, memMB: 19968, sms: 42, ces: 3, decs: 2, size: 4, starts: []uint32{0, 4}},
				{index: nvml.GPU_INSTANCE_PROFILE_4_SLICE, id: 5, name: "4g.20gb", slices: 4, count: 1, memMB: 19968, sms: 56, ces: 4, decs: 2, size: 4, starts: []uint32{0}},
				{index: nvml.GPU_INSTANCE_PROFILE_7_SLICE, id: 0, name: "7g.40gb", slices: 7, count: 1, memMB: 40192, sms: 98, ces: 7, decs: 5, jpegs: 1, ofas: 1, size: 8, starts: []uint32{0}},
			},
		}, true
	case ModelH100PCIe80GB:
		// SM counts are left 0: no source at hand gives them for the PCIe
		// board (the -lgip output we have is from a 132-SM SXM5 board). The
		// memory total is what NVML gave on an H100 SXM5 80GB (81559 MiB of
		// the nominal 81920), the same GH100 with 80 GB (?) for the PCIe.
		return model{
			name:      "NVIDIA H100 PCIe",
			mixedSize: true,
			pciID:     0x233110DE,
			memMB:     81559,
			memSlices: 8,
			vgpuTypes: kernelTypes(simkernel.ModelH100VF),
			profiles: []profile{
				{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE, id: 19, name: "1g.10gb", slices: 1, count: 7, memMB: 9984, ces: 1, decs: 1, jpegs: 1, size: 1, starts: eighths},
				{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, id: 20, name: "1g.10gb+me", slices: 1, count: 1, memMB: 9984, ces: 1, decs: 1, jpegs: 1, ofas: 1, size: 1, starts: eighths},
				{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, id: 15, name: "1g.20gb", slices: 1, count: 4, memMB: 20096, ces: 1, decs: 1, jpegs: 1, size: 2, starts: quarters},
				{index: nvml.GPU_INSTANCE_PROFILE_2_SLICE, id: 14, name: "2g.20gb", slices: 2, count: 3, memMB: 20096, ces: 2, decs: 2, jpegs: 2, size: 2, starts: []uint32{0, 2, 4}},
				{index: nvml.GPU_INSTANCE_PROFILE_3_SLICE, id: 9, name: "3g.40gb", slices: 3, count: 2, memMB: 40448, ces: 3, decs: 3, jpegs: 3, size: 4, starts: []uint32{0, 4}},
				{index: nvml.GPU_INSTANCE_PROFILE_4_SLICE, id: 5, name: "4g.40gb", slices: 4, count: 1, memMB: 40448, ces: 4, decs: 4, jpegs: 4, size: 4, starts: []uint32{0}},
				{index: nvml.GPU_INSTANCE_PROFILE_7_SLICE, id: 0, name: "7g.80gb", slices: 7, count: 1, memMB: 81152, ces: 8, decs: 7, jpegs: 7, ofas: 1, size: 8, starts: []uint32{0}},
			},
		}, true
	case ModelH200SXM141GB:
		// Measured with NVML on an H200 SXM 141GB (10de:2335), datacenter
		// driver 580.159.04, MIG off: nvmlDeviceGetGpuInstanceProfileInfo
		// for every index (5, 6, 8 and 10-16 NOT_SUPPORTED, 17
		// INVALID_ARGUMENT), its placements, nvidia-smi mig -lgip's engine
		// counts, and a memory total of 143771 MiB, below the nominal
		// 141 GB (144384 MiB). The name is nvidia-smi -L's for the board.
		return model{
			name:      "NVIDIA H200",
			mixedSize: true,
			pciID:     0x233510DE,
			memMB:     143771,
			memSlices: 8,
			profiles: []profile{
				{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE, id: 19, name: "1g.18gb", slices: 1, count: 7, memMB: 16384, sms: 16, ces: 1, decs: 1, jpegs: 1, size: 1, starts: eighths},
				{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, id: 20, name: "1g.18gb+me", slices: 1, count: 1, memMB: 16384, sms: 16, ces: 1, decs: 1, jpegs: 1, ofas: 1, size: 1, starts: eighths},
				{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, id: 15, name: "1g.35gb", slices: 1, count: 4, memMB: 33280, sms: 26, ces: 1, decs: 1, jpegs: 1, size: 2, starts: quarters},
				{index: nvml.GPU_INSTANCE_PROFILE_2_SLICE, id: 14, name: "2g.35gb", slices: 2, count: 3, memMB: 33280, sms: 32, ces: 2, decs: 2, jpegs: 2, size: 2, starts: []uint32{0, 2, 4}},
				{index: nvml.GPU_INSTANCE_PROFILE_3_SLICE, id: 9, name: "3g.71gb", slices: 3, count: 2, memMB: 71424, sms: 60, ces: 3, decs: 3, jpegs: 3, size: 4, starts: []uint32{0, 4}},
				{index: nvml.GPU_INSTANCE_PROFILE_4_SLICE, id: 5, name: "4g.71gb", slices: 4, count: 1, memMB: 71424, sms: 64, ces: 4, decs: 4, jpegs: 4, size: 4, starts: []uint32{0}},
				{index: nvml.GPU_INSTANCE_PROFILE_7_SLICE, id: 0, name: "7g.141gb", slices: 7, count: 1, memMB: 143360, sms: 132, ces: 8, decs: 7, jpegs: 7, ofas: 1, size: 8, starts: []uint32{0}},
			},
		}, true
	case ModelT4:
		return model{name: "Tesla T4", pciID: 0x1EB810DE, memMB: 16384, mixedSize: true}, true
	case ModelL40S:
		return model{name: "NVIDIA L40S", pciID: 0x26B910DE, memMB: 49152, vgpuTypes: l40sVGPUTypes(), mixedSize: true}, true
	case ModelA30PCIe24GB:
		return model{
			name:      "NVIDIA A30",
			mixedSize: true,
			pciID:     0x20B710DE,
			memMB:     24576,
			memSlices: 4,
			vgpuTypes: kernelTypes(simkernel.ModelA30VF),
			profiles: []profile{
				{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE, id: 14, name: "1g.6gb", slices: 1, count: 4, memMB: 5952, sms: 14, ces: 1, decs: 1, size: 1, starts: []uint32{0, 1, 2, 3}},
				{index: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, id: 21, name: "1g.6gb+me", slices: 1, count: 1, memMB: 5952, sms: 14, ces: 1, decs: 1, jpegs: 1, ofas: 1, size: 1, starts: []uint32{0, 1, 2, 3}},
				{index: nvml.GPU_INSTANCE_PROFILE_2_SLICE, id: 5, name: "2g.12gb", slices: 2, count: 2, memMB: 11968, sms: 28, ces: 2, decs: 2, size: 2, starts: []uint32{0, 2}},
				{index: nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, id: 6, name: "2g.12gb+me", slices: 2, count: 1, memMB: 11968, sms: 28, ces: 2, decs: 2, jpegs: 1, ofas: 1, size: 2, starts: []uint32{0, 2}},
				{index: nvml.GPU_INSTANCE_PROFILE_4_SLICE, id: 0, name: "4g.24gb", slices: 4, count: 1, memMB: 24000, sms: 56, ces: 4, decs: 4, jpegs: 1, ofas: 1, size: 4, starts: []uint32{0}},
			},
		}, true
	}
	return model{}, false
}

func (m *model) byIndex(index int) (profile, bool) {
	for _, p := range m.profiles {
		if p.index == index {
			return p, true
		}
	}
	return profile{}, false
}

func (m *model) byID(id uint32) (profile, bool) {
	for _, p := range m.profiles {
		if p.id == id {
			return p, true
		}
	}
	return profile{}, false
}

// full is the profile spanning every memory slice; its JPEG and OFA counts
// are the GPU's whole media pool.
func (m *model) full() profile {
	for _, p := range m.profiles {
		if p.size == m.memSlices {
			return p
		}
	}
	return profile{}
}
