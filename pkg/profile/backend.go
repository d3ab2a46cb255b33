package profile

import (
	"fmt"

	"github.com/vgpu-project/vgpu/pkg/inventory"
)

// Backend names what realises the profile: the mdev type or NVIDIA type,
// and the vGPU scheduler and mixed-size mode it sets; "? (name)" for a
// type the catalog gives by name only (its id is read from the hardware).
func (p Profile) Backend() string {
	b := p.typeBackend()
	if p.Scheduler != nil {
		b += ", " + p.Scheduler.String()
	}
	if p.MixedSize {
		b += ", mixed-size mode"
	}
	return b
}

// typeBackend names the type, or the VF split, that realises p.
func (p Profile) typeBackend() string {
	switch {
	case p.Mdev.ID != "":
		return fmt.Sprintf("%s (%s)", p.Mdev.ID, p.Mdev.Name)
	case p.NVIDIA.ID != 0 && p.GPUInstance != nil:
		return fmt.Sprintf("%d (%s) on MIG %s", p.NVIDIA.ID, p.NVIDIA.Name, p.GPUInstance.Profile)
	case p.NVIDIA.ID != 0:
		return fmt.Sprintf("%d (%s)", p.NVIDIA.ID, p.NVIDIA.Name)
	case p.NVIDIA.Name != "" && p.GPUInstance != nil:
		return fmt.Sprintf("? (%s) on MIG %s", p.NVIDIA.Name, p.GPUInstance.Profile)
	case p.Mdev.Name != "":
		return fmt.Sprintf("? (%s)", p.Mdev.Name)
	case p.NVIDIA.Name != "":
		return fmt.Sprintf("? (%s)", p.NVIDIA.Name)
	case p.Model.Dialect == inventory.DialectSRIOV && p.GIM != nil:
		return fmt.Sprintf("%d VFs, gim %s", p.Split, p.GIM.Scheduler)
	case p.Model.Dialect == inventory.DialectSRIOV && p.Xe != nil:
		s := fmt.Sprintf("%d VFs, xe", p.Split)
		if x := *p.Xe; x != (XeOptions{VRAMQuota: x.VRAMQuota}) {
			s += fmt.Sprintf(" %dms/%dus %s", x.ExecQuantumMS, x.PreemptTimeoutUS, p.Xe.XePriority())
		}
		if q := p.XeVRAMQuota(); q > 0 {
			s += fmt.Sprintf(" VRAM %d MiB pinned", q>>20)
		}
		return s
	case p.Model.Dialect == inventory.DialectSRIOV:
		return fmt.Sprintf("%d VFs", p.Split)
	case p.Model.Dialect == inventory.DialectPassthrough:
		return "vfio-pci, with its IOMMU group"
	}
	return ""
}
