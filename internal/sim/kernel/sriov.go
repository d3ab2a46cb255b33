package simkernel

import (
	"fmt"
	"syscall"
)

func (k *Kernel) addSRIOVAttrs(d *pciDev) {
	s := d.sriov
	dir := d.dir
	k.attr(dir, "sriov_totalvfs", func() string { return fmt.Sprintf("%d\n", totalVFs(d)) }, nil)
	k.constAttr(dir, "sriov_offset", fmt.Sprintf("%d\n", s.def.offset))
	k.constAttr(dir, "sriov_stride", fmt.Sprintf("%d\n", s.def.stride))
	k.constAttr(dir, "sriov_vf_device", fmt.Sprintf("%x\n", s.def.vfDevice))
	k.constAttr(dir, "sriov_vf_total_msix", "0\n")
	k.attr(dir, "sriov_numvfs", func() string { return fmt.Sprintf("%d\n", s.num) }, func(v string) syscall.Errno {
		return k.storeNumVFs(d, v)
	})
	k.attr(dir, "sriov_drivers_autoprobe", func() string { return boolDigit(s.autoprobe) }, func(v string) syscall.Errno {
		b, e := kstrtobool(v)
		if e != 0 {
			return e
		}
		s.autoprobe = b
		return 0
	})
}

// totalVFs is pci_sriov_get_totalvfs: the hardware's TotalVFs, or the limit
// the PF's own driver set while it is bound (reset when it unbinds).
func totalVFs(pf *pciDev) int {
	s := pf.sriov.def
	if pf.driver != nil && pf.model != nil && pf.driver.def.name == pf.model.driver {
		if s.driverMax > 0 {
			return s.driverMax
		}
		if pf.sriov.driverCap > 0 {
			return pf.sriov.driverCap
		}
	}
	return s.total
}

// storeNumVFs is sriov_numvfs_store, in the kernel's order of checks.
func (k *Kernel) storeNumVFs(pf *pciDev, s string) syscall.Errno {
	// Any kstrtou16 failure is EINVAL, "65536" too (measured on 6.12).
	v, e := kstrtoul(s, 16)
	if e != 0 {
		return syscall.EINVAL
	}
	n := int(v)
	if n > totalVFs(pf) {
		return syscall.ERANGE
	}
	k.lockDev(pf)
	defer k.unlockDev(pf)
	if pf.gone {
		return syscall.ENODEV
	}
	if n == pf.sriov.num {
		return 0
	}
	// "no driver bound to device; cannot configure SR-IOV"; vfio-pci without
	// enable_sriov and drivers lacking sriov_configure answer the same.
	if pf.driver == nil || !pf.driver.def.sriov {
		return syscall.ENOENT
	}
	if pf.driver.def.name == DrvXe && !k.xePFMode() {
		return syscall.ENODEV // xe_pci_sriov_configure: !IS_SRIOV_PF
	}
	if n == 0 {
		k.disableVFsWhenFree(pf)
		return 0
	}
	if pf.sriov.num != 0 {
		return syscall.EBUSY // "M VFs already enabled. Disable before enabling N VFs"
	}
	k.enableVFs(pf, n)
	return 0
}

// enableVFs creates n VFs (pci_iov_add_virtfn) and probes each as it is
// added, if the bus and the PF allow autoprobe.
func (k *Kernel) enableVFs(pf *pciDev, n int) {
	s := pf.sriov
	for i := 0; i < n; i++ {
		addr, _ := vfAddress(pf.addr, s.def, i)
		vf := &pciDev{
			name: addr.String(), addr: addr, model: pf.model, numa: pf.numa, pf: pf, vfIndex: i,
			ids: pciIDs{vendor: pf.ids.vendor, device: s.def.vfDevice, subVendor: pf.ids.subVendor,
				subDevice: pf.ids.subDevice, class: pf.ids.class, revision: pf.ids.revision},
			resets: []string{"flr"},
		}
		k.addPCIDevice(vf, pf.parent)
		k.link(pf.dir, fmt.Sprintf("virtfn%d", i), vf.dir.path())
		s.vfs = append(s.vfs, vf)
	}
	s.num = n
	k.xeLinkVFs(pf)
	k.migVFs(pf, true)
	if k.busAutoprobe {
		for _, vf := range s.vfs {
			k.probe(vf)
		}
	}
}

// disableVFsWhenFree is pci_disable_sriov from a caller that may block:
// the VFs' drivers are removed one by one, and vfio-pci's remove waits for
// the user to close the group. k.mu is held.
func (k *Kernel) disableVFsWhenFree(pf *pciDev) {
	k.waitFor(func() bool {
		for _, vf := range pf.sriov.vfs {
			if !vf.gone && (vf.busy || k.inUse(vf)) {
				return false
			}
		}
		return true
	})
	if !pf.gone && pf.sriov.num != 0 {
		k.disableVFs(pf)
	}
}

// disableVFs removes every VF, last first, as pci_iov_remove_virtfn does.
// Nothing on the VFs is in use.
func (k *Kernel) disableVFs(pf *pciDev) {
	s := pf.sriov
	k.xeReleaseVFs(pf, s.num)
	for i := len(s.vfs) - 1; i >= 0; i-- {
		vf := s.vfs[i]
		if !vf.gone {
			k.removeDevice(vf)
		}
		k.detachNode(pf.dir.children[fmt.Sprintf("virtfn%d", i)])
	}
	s.vfs = nil
	s.num = 0
	k.migVFs(pf, false)
}
