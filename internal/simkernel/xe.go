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
// sysfs-driver-intel-xe-sriov; VENDORS.md §5 cites them.
//
//   - PF mode needs xe.max_vfs > 0 (0 was the default before the 2026
//     "unlimited" one); without it sriov_configure answers ENODEV and there
//     is no sriov_admin/. max_vfs caps sriov_totalvfs (pf_reduce_totalvfs).
//   - sriov_admin/ (Linux 6.19+) holds pf/ and vf1..vfTotal/ whatever the
//     VF count, each with profile/{exec_quantum_ms, preempt_timeout_us}
//     (u32, RW) and profile/sched_priority ("[low] normal high"; writable
//     for the PF only, read-only for VFs, whose priority changes only in
//     bulk), vfN/stop (WO) and vfN/device while VF N is enabled;
//     .bulk_profile/ has the three as write-only files applied to every
//     function, where "high" is refused (the GuC allows it for the PF only).
//   - Disabling the VFs releases each one's configuration, its execution
//     quantum and preemption timeout included (pf_release_vf_config ->
//     pf_reset_config_sched). The VFs' priority is one setting for all of
//     them (only the bulk file changes it), kept across disabling: this
//     model's reading of the GuC's GT-wide scheduling policy (VENDORS.md).
//
// Not modelled: vram_quota (Linux 7.0), fair resource provisioning and its
// failures, tiles that disagree (EUCLEAN), the GuC refusing a change (EIO).

// XeAdmin values of Host.XeAdmin: which sriov_admin ABI the kernel has.
const (
	XeAdmin619  = "6.19" // scheduling profiles
	XeAdminNone = "none" // before 6.19: no sriov_admin/
)

var xePriorities = []string{"low", "normal", "high"}

// xeAdmin is a PF's sriov_admin/ tree while xe drives it in PF mode.
type xeAdmin struct {
	dir *node
	fns []*xeFn // [0] the PF, [n] VF n
	// vfPriority is every VF's priority; fns[0].priority the PF's own.
	vfPriority int
}

type xeFn struct {
	dir      *node
	eq, pt   uint32
	priority int // the PF's
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
	x := &xeAdmin{dir: k.mkdir(pf.dir, "sriov_admin")}
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
			k.attr(f.dir, "stop", nil, func(s string) syscall.Errno {
				_, e := kstrtobool(s)
				return e
			})
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
	pf.xe = x
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

// xeLinkVFs adds vfN/device for the VFs just enabled.
func (k *Kernel) xeLinkVFs(pf *pciDev) {
	if pf.xe == nil {
		return
	}
	for i, vf := range pf.sriov.vfs {
		if i+1 < len(pf.xe.fns) {
			k.link(pf.xe.fns[i+1].dir, "device", vf.dir.path())
		}
	}
}

// xeReleaseVFs is pf_unprovision_vfs: links gone, configurations reset.
func (k *Kernel) xeReleaseVFs(pf *pciDev, num int) {
	if pf.xe == nil {
		return
	}
	for n := 1; n <= num && n < len(pf.xe.fns); n++ {
		f := pf.xe.fns[n]
		k.detachNode(f.dir.children["device"])
		f.eq, f.pt = 0, 0
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
