package simkernel

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Intel xe as the PF driver of Battlemage (Arc Pro B-series), from Linux's
// drivers/gpu/drm/xe (xe_pci_sriov.c, xe_sriov_pf_sysfs.c,
// xe_gt_sriov_pf_config.c) and Documentation/ABI/testing/
// sysfs-driver-intel-xe-sriov; docs/vendors/intel.md sums them up.
//
//   - PF mode needs xe.max_vfs > 0 (0 was the default before the 2026
//     "unlimited" one); without it sriov_configure answers ENODEV and there
//     is no sriov_admin/. max_vfs caps sriov_totalvfs (pf_reduce_totalvfs).
//   - sriov_admin/ (Linux 6.19+) holds pf/ and vf1..vfTotal/ whatever the
//     VF count, each with profile/{exec_quantum_ms, preempt_timeout_us}
//     (u32, RW) and profile/sched_priority ("[low] normal high"; writable
//     for the PF only, read-only for VFs, whose priority changes only in
//     bulk), vfN/stop (WO: stops the VF until its FLR, see xeFn.stop)
//     and vfN/device while VF N is enabled;
//     .bulk_profile/ has the three as write-only files applied to every
//     function, where "high" is refused (the GuC allows it for the PF only).
//   - Disabling the VFs releases each one's configuration, its execution
//     quantum and preemption timeout included (pf_release_vf_config ->
//     pf_reset_config_sched). The VFs' priority is one setting for all of
//     them (only the bulk file changes it), kept across disabling: this
//     model's reading of the GuC's GT-wide scheduling policy
//     (xe_gt_sriov_pf_policy.c; docs/vendors/intel.md, "How xe behaves").
//
//   - Linux 7.0 adds vfN/profile/vram_quota (u64 bytes, RW; not for the PF)
//     and .bulk_profile/vram_quota (WO), on discrete GPUs with an LMTT
//     (BMG has one): commit b1d2746aa5 "drm/xe/pf: Allow to change VFs VRAM
//     quota using sysfs", and the ABI entry of 9ca192cbcd. A store is
//     kstrtou64 then pf_provision_vf_lmem (xe_gt_sriov_pf_config.c): the
//     size is rounded up to 2 MiB (pf_get_lmem_alignment), the VF's old
//     object released, a new one allocated from the VRAM free at that
//     moment, VFs enabled or not; the allocation failing is ENOSPC (?). A VF
//     that runs refuses the change ("otherwise GuC will complain", the
//     commit; EIO here, "FW refuses" in the ABI, (?)): this model counts a
//     VF whose VFIO group is open as running (?). The bulk file provisions
//     vf1..vfTotal in turn and stops at the first failure
//     (xe_gt_sriov_pf_config_bulk_set_lmem's loop; which VFs the 7.0 bulk
//     store walks is (?)).
//   - Enabling VFs auto-provisions VRAM only when none of them has any
//     ("Any non-zero initial VRAM provisioning will block VFs
//     auto-provisioning", ABI; "drm/xe/pf: Skip VRAM auto-provisioning if
//     already provisioned"): each gets (free - 128 MiB spare) / n, rounded
//     down to 2 MiB (pf_estimate_fair_lmem after fef8b64e48e8 dropped the
//     power-of-two rounding; later kernels' pf_profile_fair_lmem may differ
//     (?)). Disabling the VFs releases every VF's VRAM ("Once the VFs are
//     disabled, all VRAM provisioning will be released", ABI).
//   - The PF keeps 2160 MiB of a card's VRAM for itself (stolen memory, its
//     own objects): a 16 GB Battlemage log shows "LMEM available(14096M)"
//     after the 128 MiB spare (commit fef8b64e48e8's message; that it is a
//     B50 and that the B60 keeps the same are (?)).
//
// Not modelled: fair provisioning of GGTT, contexts and doorbells and its
// failures, tiles that disagree (EUCLEAN), the GuC refusing a scheduling
// change (EIO).

// XeAdmin values of Host.XeAdmin: which sriov_admin ABI the kernel has.
const (
	XeAdmin70   = "7.0"  // scheduling profiles and vram_quota
	XeAdmin619  = "6.19" // scheduling profiles
	XeAdminNone = "none" // before 6.19: no sriov_admin/
)

// xe's VRAM provisioning constants (xe_gt_sriov_pf_config.c).
const (
	xeLMEMAlign     = 2 << 20   // pf_get_lmem_alignment
	xeLMEMSpare     = 128 << 20 // pf_get_min_spare_lmem
	xePFOwnVRAMSize = 2160 << 20
)

var xePriorities = []string{"low", "normal", "high"}

// xeAdmin is a PF's sriov_admin/ tree while xe drives it in PF mode.
type xeAdmin struct {
	dir *node
	pf  *pciDev
	fns []*xeFn // [0] the PF, [n] VF n
	// vfPriority is every VF's priority; fns[0].priority the PF's own.
	vfPriority int
	// vram is what the PF can provision to VFs (VRAM less its own); 0 on
	// a kernel without vram_quota.
	vram uint64
}

type xeFn struct {
	dir      *node
	eq, pt   uint32
	priority int    // the PF's
	quota    uint64 // a VF's provisioned VRAM
	stopped  bool   // a VF's GuC state is STOPPED (until its FLR)
}

// stop is vfN/stop: DEFINE_SIMPLE_CONTROL_SRIOV_VF_ATTR(stop) in
// xe_sriov_pf_sysfs.c takes kstrtobool, does nothing for false, and
// calls xe_sriov_pf_control_stop_vf for true, whose per-GT
// xe_gt_sriov_pf_control_stop_vf (xe_gt_sriov_pf_control.c) refuses a VF
// already stopped with ESTALE ("VF%u was already stopped!"). Only the VF's
// FLR makes it READY again (the VF FLR state machine there; the ABI: "To
// allow scheduling this VF again, the VF FLR must be triggered"). What the
// GuC answers for a VF that is not enabled is not modelled (?).
func (f *xeFn) stop(s string) syscall.Errno {
	yes, e := kstrtobool(s)
	switch {
	case e != 0:
		return e
	case !yes:
		return 0
	case f.stopped:
		return syscall.ESTALE
	}
	f.stopped = true
	return 0
}

// xeFLR is VF vf's function level reset as xe sees it: a stopped VF is
// READY again.
func (k *Kernel) xeFLR(vf *pciDev) {
	if vf.pf == nil || vf.pf.xe == nil || vf.vfIndex+1 >= len(vf.pf.xe.fns) {
		return
	}
	vf.pf.xe.fns[vf.vfIndex+1].stopped = false
}

// xePFMode reports whether xe runs PFs in PF mode (xe.max_vfs != 0).
func (k *Kernel) xePFMode() bool { return k.host.XeMaxVFs == nil || *k.host.XeMaxVFs != 0 }

// xeTotalVFs is what xe leaves of the hardware's TotalVFs.
func (k *Kernel) xeTotalVFs(pf *pciDev) int {
	total := pf.sriov.def.total
	if m := k.host.XeMaxVFs; m != nil && *m > 0 && *m < total {
		return *m
	}
	return total
}

// addXeModule shows xe's max_vfs parameter (0400, as xe_module.c declares it).
func (k *Kernel) addXeModule() {
	v := "4294967295\n"
	if m := k.host.XeMaxVFs; m != nil && *m >= 0 {
		v = fmt.Sprintf("%d\n", *m)
	}
	n := k.constAttr(k.mkdirAll(sysfs.Modules+"/"+DrvXe+"/parameters"), "max_vfs", v)
	n.perm = 0o400
}

// addXeAdmin builds sriov_admin/ as xe_sriov_pf_sysfs_init does at probe.
func (k *Kernel) addXeAdmin(pf *pciDev) {
	if !k.xePFMode() || k.host.XeAdmin == XeAdminNone {
		return
	}
	x := &xeAdmin{dir: k.mkdir(pf.dir, "sriov_admin"), pf: pf}
	if k.host.XeAdmin == XeAdmin70 && pf.model != nil && pf.model.vramMB > 0 {
		x.vram = uint64(pf.model.vramMB)<<20 - xePFOwnVRAMSize
	}
	total := k.xeTotalVFs(pf)
	for n := 0; n <= total; n++ {
		name := "pf"
		if n > 0 {
			name = fmt.Sprintf("vf%d", n)
		}
		f := &xeFn{dir: k.mkdir(x.dir, name)}
		x.fns = append(x.fns, f)
		prof := k.mkdir(f.dir, "profile")
		k.attr(prof, "exec_quantum_ms", func() string { return fmt.Sprintf("%d\n", f.eq) },
			func(s string) syscall.Errno { return setU32(&f.eq, s) })
		k.attr(prof, "preempt_timeout_us", func() string { return fmt.Sprintf("%d\n", f.pt) },
			func(s string) syscall.Errno { return setU32(&f.pt, s) })
		show := func() string { return priorityChoice(x.vfPriority, false) }
		if n == 0 {
			show = func() string { return priorityChoice(f.priority, true) }
			k.attr(prof, "sched_priority", show, func(s string) syscall.Errno {
				return setPriority(&f.priority, s, true)
			})
		} else {
			k.attr(prof, "sched_priority", show, nil)
			if x.vram > 0 {
				k.attr(prof, "vram_quota", func() string { return fmt.Sprintf("%d\n", f.quota) },
					func(s string) syscall.Errno { return x.setQuota(n, s) })
			}
			k.attr(f.dir, "stop", nil, func(s string) syscall.Errno { return f.stop(s) })
		}
	}
	k.link(x.fns[0].dir, "device", pf.dir.path())
	bulk := k.mkdir(x.dir, ".bulk_profile")
	k.attr(bulk, "exec_quantum_ms", nil, func(s string) syscall.Errno {
		return x.bulk(s, func(f *xeFn, s string) syscall.Errno { return setU32(&f.eq, s) })
	})
	k.attr(bulk, "preempt_timeout_us", nil, func(s string) syscall.Errno {
		return x.bulk(s, func(f *xeFn, s string) syscall.Errno { return setU32(&f.pt, s) })
	})
	k.attr(bulk, "sched_priority", nil, func(s string) syscall.Errno {
		if e := setPriority(&x.vfPriority, s, false); e != 0 {
			return e
		}
		x.fns[0].priority = x.vfPriority
		return 0
	})
	if x.vram > 0 {
		k.attr(bulk, "vram_quota", nil, func(s string) syscall.Errno {
			for n := 1; n < len(x.fns); n++ {
				if e := x.setQuota(n, s); e != 0 {
					return e
				}
			}
			return 0
		})
	}
	pf.xe = x
}

// free is the VRAM no VF holds.
func (x *xeAdmin) free() uint64 {
	free := x.vram
	for _, f := range x.fns[1:] {
		free -= f.quota
	}
	return free
}

// setQuota is a store to VF n's vram_quota: pf_provision_vf_lmem.
func (x *xeAdmin) setQuota(n int, s string) syscall.Errno {
	v, e := kstrtoul(s, 64)
	if e != 0 {
		return e
	}
	if n <= len(x.pf.sriov.vfs) && x.pf.sriov.vfs[n-1].group.inUse() {
		return syscall.EIO // the GuC refuses to change a running VF
	}
	size := (v + xeLMEMAlign - 1) / xeLMEMAlign * xeLMEMAlign
	if v > ^uint64(0)-xeLMEMAlign || size > x.free()+x.fns[n].quota {
		return syscall.ENOSPC
	}
	x.fns[n].quota = size
	return 0
}

// autoProvisionVRAM is pf_provision_vfs's VRAM part when n VFs are enabled:
// a fair share each, unless some VF already has VRAM.
func (x *xeAdmin) autoProvisionVRAM(n int) {
	if x.vram == 0 {
		return
	}
	for i := 1; i <= n && i < len(x.fns); i++ {
		if x.fns[i].quota != 0 {
			return
		}
	}
	avail := uint64(0)
	if free := x.free(); free > xeLMEMSpare {
		avail = (free - xeLMEMSpare) / xeLMEMAlign * xeLMEMAlign
	}
	fair := avail / uint64(n) / xeLMEMAlign * xeLMEMAlign
	for i := 1; i <= n && i < len(x.fns); i++ {
		x.fns[i].quota = fair
	}
}

// bulk applies one value to every function, after checking it once.
func (x *xeAdmin) bulk(s string, set func(*xeFn, string) syscall.Errno) syscall.Errno {
	var probe xeFn
	if e := set(&probe, s); e != 0 {
		return e
	}
	for _, f := range x.fns {
		set(f, s)
	}
	return 0
}

// removeXeAdmin drops the tree when xe lets go of the PF.
func (k *Kernel) removeXeAdmin(pf *pciDev) {
	if pf.xe != nil {
		k.detachNode(pf.xe.dir)
		pf.xe = nil
	}
}

// xeLinkVFs provisions the VFs just enabled and adds their vfN/device.
func (k *Kernel) xeLinkVFs(pf *pciDev) {
	if pf.xe == nil {
		return
	}
	pf.xe.autoProvisionVRAM(len(pf.sriov.vfs))
	for i, vf := range pf.sriov.vfs {
		if i+1 < len(pf.xe.fns) {
			k.link(pf.xe.fns[i+1].dir, "device", vf.dir.path())
		}
	}
}

// xeReleaseVFs is pf_unprovision_vfs: links gone, configurations reset,
// and all VRAM provisioning released.
func (k *Kernel) xeReleaseVFs(pf *pciDev, num int) {
	if pf.xe == nil {
		return
	}
	for n := 1; n <= num && n < len(pf.xe.fns); n++ {
		f := pf.xe.fns[n]
		k.detachNode(f.dir.children["device"])
		f.eq, f.pt = 0, 0
		f.stopped = false // the VF's control state goes with it (?)
	}
	for _, f := range pf.xe.fns[1:] {
		f.quota = 0
	}
}

func setU32(v *uint32, s string) syscall.Errno {
	n, e := kstrtoul(s, 32)
	if e != 0 {
		return e
	}
	*v = uint32(n)
	return 0
}

// setPriority is __sysfs_match_string over the priorities allowed: "high"
// only for the PF.
func setPriority(p *int, s string, pf bool) syscall.Errno {
	allowed := xePriorities
	if !pf {
		allowed = allowed[:2]
	}
	s = strings.TrimSuffix(s, "\n")
	for i, name := range allowed {
		if s == name {
			*p = i
			return 0
		}
	}
	return syscall.EINVAL
}

// priorityChoice is emit_choice: the allowed names, the current one in [].
func priorityChoice(cur int, pf bool) string {
	allowed := xePriorities
	if !pf {
		allowed = allowed[:2]
	}
	parts := make([]string, len(allowed))
	for i, name := range allowed {
		parts[i] = name
		if i == cur {
			parts[i] = "[" + name + "]"
		}
	}
	return strings.Join(parts, " ") + "\n"
}
