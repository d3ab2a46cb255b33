package simkernel

import (
	"fmt"
	"strings"
	"syscall"
)

// nvVF is a VF's nvidia/ directory (NVIDIA vGPU 17+ on Ada/Hopper). The
// driver registers the VF with vfio_pci_core at probe
// (nv_vfio_pci_core_init), so /dev/vfio/<group> is there from then on;
// opening the device before a type is set fails ENODEV
// (nv_vfio_pci_open_device: "current_vgpu_type of VF not configured").
type nvVF struct {
	dir     *node
	current int    // type id, 0 none
	params  string // vgpu_params
	gi      int    // the GPU instance a MIG-backed vGPU runs on; -1 none
}

func (k *Kernel) addNVDir(vf *pciDev) {
	vf.nv = &nvVF{gi: -1}
	vf.nv.dir = k.mkdir(vf.dir, "nvidia")
	k.attr(vf.nv.dir, "creatable_vgpu_types", func() string { return k.creatable(vf) }, nil)
	k.attr(vf.nv.dir, "current_vgpu_type", func() string { return fmt.Sprintf("%d\n", vf.nv.current) },
		func(s string) syscall.Errno { return k.storeCurrentType(vf, s) })
	k.attr(vf.nv.dir, "vgpu_params", func() string { return vf.nv.params + "\n" },
		func(s string) syscall.Errno { return storeVGPUParams(&vf.nv.params, vf.group, s) })
}

// storeVGPUParams keeps NVIDIA's plugin parameters ("name=value, ...")
// for the vGPU's next VM start; " " clears them. The driver takes them
// only while no VM uses the vGPU (R570's usage_count check: EBUSY).
func storeVGPUParams(params *string, g *iommuGroup, s string) syscall.Errno {
	if g.inUse() {
		return syscall.EBUSY
	}
	*params = strings.TrimSpace(s)
	return 0
}

// removeNVDir frees the VF's type (nobody holds it open) and the directory.
func (k *Kernel) removeNVDir(vf *pciDev) {
	delete(vf.pf.sriov.nvPool.uses, vf)
	k.releaseInstance(vf)
	k.detachNode(vf.nv.dir)
	vf.nv = nil
}

// creatable lists the types this VF can take now: none once it has one;
// with MIG on, the MIG-backed types of free GPU instances only (mig.go);
// otherwise those of the size already in use on the GPU (any size on an
// idle GPU, or in mixed-size mode) that still fit in the remaining
// framebuffer. Mixed-size mode's lower counts of some types (NVIDIA's
// placements) are not modelled.
func (k *Kernel) creatable(vf *pciDev) string {
	var b strings.Builder
	b.WriteString("ID    : vGPU Name\n")
	if vf.nv.current != 0 {
		return b.String()
	}
	if on, gis := k.migOn(vf.pf); on {
		k.migCreatable(vf, gis, &b)
		return b.String()
	}
	mix := k.nvMix(vf.pf)
	for _, t := range vf.pf.model.vfNV.types {
		if vf.pf.sriov.nvPool.availableAs(mix, t.name, t.sizeMB, []int{t.sizeMB}) > 0 {
			fmt.Fprintf(&b, "%-6d: %s\n", t.id, t.name)
		}
	}
	return b.String()
}

// storeCurrentType is nvidia-vgpu-vfio's current_vgpu_type_store (its
// vfio-pci-core glue for vGPU 17+, NVIDIA's vGPU KVM package, ©2017-2022):
// kstrtol(buf, 10) (so "0x47b" is EINVAL); 0 is nv_vfio_pci_remove, which
// refuses a VF without a vGPU ("No vGPU exists on current device": EPERM);
// any other value nv_vfio_pci_create, which refuses a VF that has one, even
// of the same type ("vGPU device already created": EPERM), and otherwise
// asks the resource manager, whose refusal of a type that is not creatable
// here (kvgpumgrCreateRequestVgpu, open-gpu-kernel-modules
// src/nvidia/src/kernel/virtualization/kernel_vgpu_mgr.c) nv_vgpu_vfio_create
// turns into EIO ("NVRM: Failed to add vgpu create request"). Freeing a
// vGPU a VM holds is EBUSY (the upstream RFC vfio/nvidia-vgpu's; the R550
// glue's nv_vgpu_vfio_destroy answers EPERM).
func (k *Kernel) storeCurrentType(vf *pciDev, s string) syscall.Errno {
	v, e := kstrtol10(s)
	if e != 0 {
		return e
	}
	nv := vf.nv
	pl := vf.pf.sriov.nvPool
	if v == 0 {
		if nv.current == 0 {
			return syscall.EPERM
		}
		if vf.group.inUse() {
			return syscall.EBUSY
		}
		delete(pl.uses, vf)
		k.releaseInstance(vf)
		nv.current = 0
		return 0
	}
	if nv.current != 0 {
		return syscall.EPERM
	}
	id := int(uint32(v)) // (NvU32) l_vgpu_type_id
	if on, gis := k.migOn(vf.pf); on || k.isMIGType(vf.pf, id) {
		return k.storeMIGType(vf, id, on, gis)
	}
	for _, t := range vf.pf.model.vfNV.types {
		if t.id != id {
			continue
		}
		if pl.availableAs(k.nvMix(vf.pf), t.name, t.sizeMB, []int{t.sizeMB}) < 1 {
			return syscall.EIO
		}
		pl.uses[vf] = poolUse{key: t.name, size: t.sizeMB, cost: []int{t.sizeMB}}
		nv.current = id
		return 0
	}
	return syscall.EIO // not a type of this GPU: the resource manager knows none
}

func (k *Kernel) isMIGType(pf *pciDev, id int) bool {
	for _, t := range pf.model.vfNV.mig {
		if t.id == id {
			return true
		}
	}
	return false
}

// storeMIGType creates a MIG-backed vGPU on the lowest free GPU instance of
// the type's profile. A type that is not creatable now fails with EIO:
// kvgpumgrCreateRequestVgpu refuses a MIG-backed type with MIG off, and
// any type with MIG on but no instance, with NV_ERR_INVALID_OPERATION
// (0x38, the "Failed to add vgpu create request: 0x38" a host shows).
func (k *Kernel) storeMIGType(vf *pciDev, id int, on bool, gis []MIGInstance) syscall.Errno {
	if !on {
		return syscall.EIO
	}
	for _, t := range vf.pf.model.vfNV.mig {
		if t.id != id {
			continue
		}
		gi := k.freeInstance(vf.pf, gis, t.gi)
		if gi < 0 || k.mig.HoldInstance(vf.pf.name, gi, true) != nil {
			return syscall.EIO
		}
		vf.nv.current, vf.nv.gi = id, gi
		return 0
	}
	return syscall.EIO
}
