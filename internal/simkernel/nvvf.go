package simkernel

import (
	"fmt"
	"strings"
	"syscall"
)

// nvVF is a VF's nvidia/ directory (NVIDIA vGPU 17+ on Ada/Hopper).
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

// storeCurrentType: "0" frees (EBUSY while a VFIO user holds the VF); a
// listed id assigns it; the same id again is a no-op; another id while one
// is set is EBUSY; an id not creatable here, or junk, is EINVAL.
func (k *Kernel) storeCurrentType(vf *pciDev, s string) syscall.Errno {
	v, e := kstrtoul(s, 32)
	if e != 0 {
		return syscall.EINVAL
	}
	id := int(v)
	nv := vf.nv
	pl := vf.pf.sriov.nvPool
	if id == 0 {
		if nv.current == 0 {
			return 0
		}
		if vf.group.inUse() {
			return syscall.EBUSY
		}
		delete(pl.uses, vf)
		k.releaseInstance(vf)
		nv.current = 0
		k.syncVFIO(vf.group)
		return 0
	}
	if nv.current == id {
		return 0
	}
	if nv.current != 0 {
		return syscall.EBUSY
	}
	if on, gis := k.migOn(vf.pf); on || k.isMIGType(vf.pf, id) {
		return k.storeMIGType(vf, id, on, gis)
	}
	for _, t := range vf.pf.model.vfNV.types {
		if t.id != id {
			continue
		}
		if pl.availableAs(k.nvMix(vf.pf), t.name, t.sizeMB, []int{t.sizeMB}) < 1 {
			return syscall.EINVAL
		}
		pl.uses[vf] = poolUse{key: t.name, size: t.sizeMB, cost: []int{t.sizeMB}}
		nv.current = id
		k.syncVFIO(vf.group)
		return 0
	}
	return syscall.EINVAL
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
// the type's profile. A type that is not creatable now (MIG off, no free
// instance, or a time-sliced type with MIG on) fails with EIO, as the
// driver answers "Failed to add vgpu create request" (VENDORS.md §1,
// cubecos).
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
		k.syncVFIO(vf.group)
		return 0
	}
	return syscall.EIO
}
