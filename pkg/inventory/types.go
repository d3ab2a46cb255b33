package inventory

import (
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/nvvf"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/xe"
)

// Dialect is the way a GPU is split into vGPUs (docs/profiles.md,
// "Dialects and their splits").
type Dialect string

const (
	// DialectSRIOV: equal-split SR-IOV; each VF is a vGPU on vfio-pci (AMD MxGPU).
	DialectSRIOV Dialect = "sriov"
	// DialectMdev: mdev types on the PF (NVIDIA GRID T4, Intel GVT-g).
	DialectMdev Dialect = "mdev"
	// DialectSRIOVMdev: VFs enabled, one mdev per VF (NVIDIA before vGPU 17 or kernel 6.8).
	DialectSRIOVMdev Dialect = "sriov-mdev"
	// DialectNVIDIAVF: VFs enabled, vGPU type written to the VF (NVIDIA vGPU 17+).
	DialectNVIDIAVF Dialect = "nvidia-vf"
	// DialectPassthrough: the whole PF on vfio-pci.
	DialectPassthrough Dialect = "passthrough"
)

// Unavailable is a dialect the GPU would speak that this host cannot carve
// now, and why (the IOMMU off, no SR-IOV capability, not NVIDIA's vGPU
// host driver): the words every surface shows.
type Unavailable struct {
	Dialect Dialect `json:"dialect"`
	Reason  string  `json:"reason"`
}

// GPU is one physical function with display/3D/processing-accelerator class.
type GPU struct {
	Address    pci.Address `json:"address"`
	VendorID   uint16      `json:"vendorID"`
	DeviceID   uint16      `json:"deviceID"`
	VendorName string      `json:"vendorName"` // from pci.ids; hex id when unknown
	DeviceName string      `json:"deviceName"`
	Class      uint32      `json:"class"`
	NUMANode   int         `json:"numaNode"`   // -1 when the host has no NUMA
	IOMMUGroup int         `json:"iommuGroup"` // -1 when there is no IOMMU group
	Driver     string      `json:"driver"`     // "" when unbound
	// FramebufferMB is the GPU's memory where the hardware says it (NVML's
	// total where a caller asked it, mdev type descriptions, NVIDIA type
	// names, amdgpu mem_info_vram_total); 0 unknown.
	FramebufferMB uint64 `json:"framebufferMB,omitempty"`
	// Dialects this host can carve the GPU in now, most specific first;
	// for an NVIDIA GPU without VFs, what the host driver's branch says.
	Dialects []Dialect `json:"dialects"`
	// Unavailable lists the dialects the GPU would speak that cannot be
	// carved here now, each with its reason; Dialects and Unavailable
	// never share one.
	Unavailable []Unavailable `json:"unavailable,omitempty"`
	// BootVGA: the firmware used the GPU as the boot display (boot_vga
	// 1), so it drives the host's console; a passthrough takes it only
	// when forced.
	BootVGA bool `json:"bootVGA,omitempty"`
	// NVIDIADriver is the loaded nvidia module, for NVIDIA's GPUs; nil
	// while the module is not loaded.
	NVIDIADriver *NVIDIADriver `json:"nvidiaDriver,omitempty"`
	// Guest says what shows this OS to be a virtual machine's guest (its
	// PCI host bridge is QEMU's, or NVML says the GPU is passed through);
	// "" when nothing does.
	Guest     string     `json:"guest,omitempty"`
	SRIOV     *SRIOV     `json:"sriov,omitempty"`
	MdevTypes []MdevType `json:"mdevTypes,omitempty"` // types offered by the PF itself
	// Peers share the GPU's IOMMU group. Discover leaves them out; the
	// carver reads them (GroupPeers) for a passthrough.
	Peers []Peer `json:"peers,omitempty"`
	// GIM is what old AMD GIM runs with, for a GPU it drives while it is
	// loaded.
	GIM *GIMState `json:"gim,omitempty"`
	// Xe is Intel xe's sriov_admin/ view of the GPU: nil when xe does not
	// drive it or the kernel has no sriov_admin/ (before 6.19).
	Xe *XeAdmin `json:"xe,omitempty"`
	// NVIDIATypes are the vGPU types NVIDIA's NVML says the GPU supports,
	// carved or not; sysfs does not show them (the VFs list only what can
	// be made now). Filled by a caller with NVML (carve.Carver.Enrich).
	NVIDIATypes []VGPUType `json:"nvidiaTypes,omitempty"`
	// MIGProfiles are the GPU's GPU instance profiles as NVML states them,
	// MIG on or off: each instance's memory is less than its name says.
	// Filled, with FramebufferMB, by a caller with NVML (carve.Carver.Enrich)
	// for an NVIDIA MIG-capable GPU.
	MIGProfiles []MIGProfile `json:"migProfiles,omitempty"`
}

// MIGProfile is a GPU instance profile: its id as nvidia-smi mig -lgip
// shows it, its memory in MiB, SM slices and how many instances fit.
type MIGProfile struct {
	ID       int    `json:"id"`
	MemoryMB uint64 `json:"memoryMB"`
	Slices   int    `json:"slices"`
	Count    int    `json:"count"`
}

// MIGProfile returns the profile of id, if NVML stated it.
func (g GPU) MIGProfile(id int) (MIGProfile, bool) {
	for _, p := range g.MIGProfiles {
		if p.ID == id {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// XeAdmin holds the scheduling profile of each enabled VF, VFs[i] for VF
// i (sriov_admin's vf<i+1>), and the priority all VFs share.
type XeAdmin struct {
	Priority string     `json:"priority"`
	VFs      []xe.Sched `json:"vfs"`
	// Quota: the kernel has vram_quota (Linux 7.0+); Quotas is then each
	// enabled VF's, in bytes.
	Quota  bool     `json:"vramQuota,omitempty"`
	Quotas []uint64 `json:"vramQuotas,omitempty"`
	// VFIODriver is xe-vfio-pci when it is loaded: the VFIO driver the
	// VFs migrate on. "" without it (the VFs go to vfio-pci).
	VFIODriver string `json:"vfioDriver,omitempty"`
}

// SRIOV is a PF's SR-IOV capability and current VFs.
type SRIOV struct {
	TotalVFs   int    `json:"totalVFs"`
	NumVFs     int    `json:"numVFs"`
	VFDeviceID uint16 `json:"vfDeviceID"`
	VFs        []VF   `json:"vfs,omitempty"`
}

// VF is one enabled virtual function.
type VF struct {
	Index      int         `json:"index"` // N of virtfnN
	Address    pci.Address `json:"address"`
	Driver     string      `json:"driver"`
	IOMMUGroup int         `json:"iommuGroup"`
	// MdevTypes when the VF is an mdev parent (NVIDIA before vGPU 17 or kernel 6.8).
	MdevTypes []MdevType `json:"mdevTypes,omitempty"`
	// NVIDIA per-VF types (vGPU 17+); nil when the VF has no nvidia/ dir.
	NVIDIA *NVIDIAVF `json:"nvidia,omitempty"`
}

// MdevType is one entry of mdev_supported_types.
type MdevType = mdev.Type

// NVIDIAVF is a VF's nvidia/ directory.
type NVIDIAVF struct {
	Creatable   []VGPUType `json:"creatable"`
	CurrentType int        `json:"currentType"` // 0 when none
}

// VGPUType is a line of creatable_vgpu_types.
type VGPUType = nvvf.VGPUType
