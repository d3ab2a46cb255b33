package profile

import (
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// Plan is a profile resolved on one GPU: what the carver must make.
// Exactly the fields of its Dialect are set.
type Plan struct {
	Profile string      `json:"profile"`
	GPU     pci.Address `json:"gpu"`
	// Parent is the virtual mdev parent a ResolveParent plan is for ("" for a PCI GPU).
	Parent  string            `json:"parent,omitempty"`
	Dialect inventory.Dialect `json:"dialect"`
	Split   int               `json:"split"` // vGPUs the GPU is cut into
	// FramebufferMB of one vGPU; 0 when the catalog and hardware do not say.
	FramebufferMB uint64 `json:"framebufferMB,omitempty"`

	// NumVFs to enable (sriov, sriov-mdev, nvidia-vf).
	NumVFs int `json:"numVFs,omitempty"`
	// VFDriver the VFs must end up on: "vfio-pci" (sriov) or, for a
	// model that migrates on a GPU xe drives with xe-vfio-pci loaded,
	// "xe-vfio-pci"; the vendor driver for nvidia-vf and sriov-mdev
	// ("nvidia").
	VFDriver string `json:"vfDriver,omitempty"`
	// MdevType is the type id to instantiate (mdev: Split instances on the
	// PF; sriov-mdev: one instance on each VF).
	MdevType string `json:"mdevType,omitempty"`
	// MdevTypeName is the type's name, for messages ("GRID T4-4Q").
	MdevTypeName string `json:"mdevTypeName,omitempty"`
	// NVIDIATypeID is written to each VF's current_vgpu_type (nvidia-vf).
	NVIDIATypeID int `json:"nvidiaTypeID,omitempty"`
	// NVIDIATypeName is the type's name, for messages ("NVIDIA L40S-12Q").
	NVIDIATypeName string `json:"nvidiaTypeName,omitempty"`
	// GPUInstance, for a MIG-backed profile (nvidia-vf), is the GPU
	// instance profile each vGPU runs on: MIG mode on, Split instances.
	GPUInstance *GPUInstance `json:"gpuInstance,omitempty"`
	// GIM is the old-GIM scheduler the profile asks for (nil: defaults).
	GIM *GIMOptions `json:"gim,omitempty"`
	// Scheduler is NVIDIA's vGPU scheduler it asks for (nil: the driver's).
	Scheduler *NVScheduler `json:"nvidiaScheduler,omitempty"`
	// MixedSize asks for NVIDIA's mixed-size mode (nvidia-vf).
	MixedSize bool `json:"nvidiaMixedSize,omitempty"`
	// Xe is the Intel xe scheduling profile it asks for (nil: defaults).
	Xe *XeOptions `json:"xe,omitempty"`
	// XeVRAMQuota is each VF's vram_quota in bytes (0: xe provisions).
	XeVRAMQuota uint64 `json:"xeVRAMQuota,omitempty"`
	// MdevUUIDs are the UUIDs the host config pins for the first mdevs of
	// this GPU's pool (mdev, sriov-mdev); the catalog sets none, the
	// carver's caller does.
	MdevUUIDs []string `json:"mdevUUIDs,omitempty"`
}
