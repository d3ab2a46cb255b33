package simkernel

import (
	"fmt"
	"strings"
)

// MIGHost is the nvidia driver's Multi-Instance GPU side, which NVML shows
// (internal/sim/nvml implements it). Joined with SetMIG, it makes the kernel
// behave as the vGPU 17+ driver does with MIG (docs/vendors/nvidia.md,
// "MIG-backed vGPU"): with MIG on a VF offers only
// MIG-backed types, each while a GPU instance of its profile carries no
// vGPU; sriov-manage's rebind of the PF wipes every instance; VFs make MIG
// mode changes pend; and an open NVML session holds every GPU, so the
// driver refuses its unbind lock.
type MIGHost interface {
	// MIGState reports whether MIG is on on the GPU at bus, and its
	// instances.
	MIGState(bus string) (on bool, instances []MIGInstance)
	// HoldInstance marks instance id as carrying a vGPU (NVML then refuses
	// to destroy it) or frees it.
	HoldInstance(bus string, id int, held bool) error
	// DriverRebind: the nvidia driver left the PF; every instance is gone.
	DriverRebind(bus string) error
	// SetVFsEnabled: the GPU's VFs came or went.
	SetVFsEnabled(bus string, enabled bool) error
	// Sessions counts open NVML sessions (Init without Shutdown).
	Sessions() int
	// Heterogeneous reports whether the GPU at bus is in vGPU mixed-size
	// mode (nvidia-smi vgpu -shm 1): its VFs then take time-sliced types
	// of any framebuffer size that fits, not only the size in use.
	Heterogeneous(bus string) bool
}

// MIGInstance is a GPU instance as the kernel needs it.
type MIGInstance struct {
	ID      int
	Profile string // "1g.5gb"
}

// SetMIG joins m as the NVML side of every NVIDIA GPU with per-VF types:
// MIG for those with MIG-backed types, mixed-size mode for all. Without it
// MIG and mixed-size mode are off everywhere.
func (k *Kernel) SetMIG(m MIGHost) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mig = m
}

// migOn reports whether pf runs in MIG mode, and its instances. Caller
// holds k.mu.
func (k *Kernel) migOn(pf *pciDev) (bool, []MIGInstance) {
	if k.mig == nil || pf.model == nil || pf.model.vfNV == nil || len(pf.model.vfNV.mig) == 0 {
		return false, nil
	}
	return k.mig.MIGState(pf.name)
}

// freeInstance is the lowest-id instance of profile on pf that carries no
// vGPU, as the driver chooses it; -1 when none.
func (k *Kernel) freeInstance(pf *pciDev, gis []MIGInstance, profile string) int {
	held := map[int]bool{}
	for _, vf := range pf.sriov.vfs {
		if vf.nv != nil && vf.nv.gi >= 0 {
			held[vf.nv.gi] = true
		}
	}
	for _, gi := range gis {
		if gi.Profile == profile && !held[gi.ID] {
			return gi.ID
		}
	}
	return -1
}

// migCreatable lists the MIG-backed types a VF can take now.
func (k *Kernel) migCreatable(vf *pciDev, gis []MIGInstance, b *strings.Builder) {
	for _, t := range vf.pf.model.vfNV.mig {
		if k.freeInstance(vf.pf, gis, t.gi) >= 0 {
			fmt.Fprintf(b, "%-6d: %s\n", t.id, t.name)
		}
	}
}

// releaseInstance frees the instance a VF's vGPU used.
func (k *Kernel) releaseInstance(vf *pciDev) {
	if vf.nv.gi < 0 {
		return
	}
	if k.mig != nil {
		_ = k.mig.HoldInstance(vf.pf.name, vf.nv.gi, false) // gone with a rebind: nothing to free
	}
	vf.nv.gi = -1
}

// migVFs tells the MIG side that pf's VFs came or went.
func (k *Kernel) migVFs(pf *pciDev, enabled bool) {
	if k.mig != nil && pf.model != nil && pf.model.vfNV != nil && len(pf.model.vfNV.mig) > 0 {
		_ = k.mig.SetVFsEnabled(pf.name, enabled)
	}
}

// migRebind: the nvidia driver left pf; its instances are gone, and so is
// its mixed-size mode (docs/vendors/nvidia.md, "Mixed-size mode").
func (k *Kernel) migRebind(pf *pciDev) {
	if k.mig != nil && pf.model != nil && pf.model.vfNV != nil {
		_ = k.mig.DriverRebind(pf.name) // a GPU NVML does not hold has nothing to lose
	}
}

// nvMix is how pf's VFs may mix time-sliced types: one framebuffer size
// per GPU, or any size that fits in mixed-size mode. Caller holds k.mu.
func (k *Kernel) nvMix(pf *pciDev) homogeneity {
	if k.mig != nil && k.mig.Heterogeneous(pf.name) {
		return mixAny
	}
	return pf.sriov.nvPool.mix
}

// nvmlSessions counts the NVML sessions holding every GPU.
func (k *Kernel) nvmlSessions() int {
	if k.mig == nil {
		return 0
	}
	return k.mig.Sessions()
}

// VGPUs counts the vGPUs that exist on the GPU at bus: mdevs on it or on
// its VFs, and VFs with an NVIDIA type. NVML refuses a vGPU scheduler
// change while there is any (nvmlDeviceSetVgpuSchedulerState).
func (k *Kernel) VGPUs(bus string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	pf := k.devs[bus]
	if pf == nil {
		return 0
	}
	n := 0
	for _, m := range k.mdevs {
		if d := m.parent.pci; d != nil && !m.gone && (d == pf || d.pf == pf) {
			n++
		}
	}
	if pf.sriov != nil {
		for _, vf := range pf.sriov.vfs {
			if vf.nv != nil && vf.nv.current != 0 {
				n++
			}
		}
	}
	return n
}
