package sriov

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// SetNumVFs makes pf have n VFs, following the kernel's rules: writing the
// current value is a no-op (so nothing is written), and going from M to N
// VFs (both non-zero) needs 0 in between. If enabling N fails after the
// disable, the M VFs are re-enabled. Their drivers and any mdevs or types
// on them are gone either way: a caller that changes a count owns that.
//
// Disabling blocks on a real kernel while a VFIO user holds a VF open.
func SetNumVFs(f sysfs.FS, pf pci.Address, n int) error {
	p := attr(pf, "sriov_numvfs")
	if n < 0 {
		return fmt.Errorf("set VF count of %s to %d: a count cannot be negative: %w", pf, n, syscall.EINVAL)
	}
	total, err := TotalVFs(f, pf)
	if err != nil {
		return fmt.Errorf("set VF count of %s to %d: %w", pf, n, err)
	}
	if n > total {
		// The kernel's answer, given before touching anything.
		return fmt.Errorf("%s: %s supports at most %d VFs: %w", action(pf, n, 0, p), pf, total, syscall.ERANGE)
	}
	cur, err := NumVFs(f, pf)
	if err != nil {
		return fmt.Errorf("set VF count of %s to %d: %w", pf, n, err)
	}
	if cur == n {
		return nil
	}
	if cur != 0 && n != 0 {
		if err := writeNumVFs(f, pf, 0, cur, total); err != nil {
			return err
		}
	}
	err = writeNumVFs(f, pf, n, cur, total)
	if err == nil || cur == 0 || n == 0 {
		return err
	}
	if rerr := writeNumVFs(f, pf, cur, 0, total); rerr != nil {
		return fmt.Errorf("%w; re-enabling the previous %d VFs failed too: %w", err, cur, rerr)
	}
	return fmt.Errorf("%w (the previous %d VFs were re-enabled)", err, cur)
}

// action names the step: "enable 4 VFs on X via P" or "disable the 4 VFs of X via P".
func action(pf pci.Address, n, cur int, p string) string {
	if n == 0 {
		return fmt.Sprintf("disable the %d VFs of %s via %s", cur, pf, p)
	}
	return fmt.Sprintf("enable %d VFs on %s via %s", n, pf, p)
}

// writeNumVFs writes n and turns the kernel's errno into a sentence a host
// admin can act on, keeping the errno for errors.Is.
func writeNumVFs(f sysfs.FS, pf pci.Address, n, cur, total int) error {
	p := attr(pf, "sriov_numvfs")
	err := f.WriteFile(p, []byte(strconv.Itoa(n)))
	if err == nil {
		return nil
	}
	errno := sysfs.Errno(err)
	act := action(pf, n, cur, p)
	var why string
	switch {
	case errors.Is(errno, syscall.ENOENT):
		// The kernel says ENOENT both for "no driver" and for a driver
		// without sriov_configure; the driver link tells which.
		drv, derr := pci.CurrentDriver(f, pf)
		switch {
		case derr != nil || drv == "":
			why = fmt.Sprintf("no driver bound to %s; cannot configure SR-IOV (bind its vendor driver first)", pf)
		case drv == "vfio-pci":
			why = fmt.Sprintf("%s is on vfio-pci, which enables SR-IOV only when loaded with enable_sriov=Y", pf)
		default:
			why = fmt.Sprintf("driver %s of %s does not support SR-IOV configuration via sysfs", drv, pf)
		}
	case errors.Is(errno, syscall.ERANGE):
		why = fmt.Sprintf("%s supports at most %d VFs", pf, total)
	case errors.Is(errno, syscall.EBUSY):
		why = fmt.Sprintf("%s is busy: VFs were enabled meanwhile, or its driver refuses while VFs are assigned", pf)
	case errors.Is(errno, syscall.EINVAL):
		why = fmt.Sprintf("%s rejected %d", pf, n)
	case errors.Is(errno, syscall.ENODEV):
		why = "the PF driver answers it runs no SR-IOV PF here"
		if drv, _ := pci.CurrentDriver(f, pf); drv == "xe" {
			// xe_pci_sriov_configure: !IS_SRIOV_PF (drivers/gpu/drm/xe/xe_pci_sriov.c).
			why = fmt.Sprintf("xe drives %s without SR-IOV PF mode: its max_vfs parameter is 0 (/sys/module/xe/parameters/max_vfs, the default of kernels before 7.0); boot with xe.max_vfs=%d or reload xe with max_vfs=%d", pf, max(n, 1), max(n, 1))
		}
	case errors.Is(errno, syscall.EACCES), errors.Is(errno, syscall.EPERM):
		why = "permission denied (not root, or the PF is on vfio-pci and needs its VF token)"
	default:
		why = "the PF driver failed to configure SR-IOV (see the kernel log)"
	}
	return fmt.Errorf("%s: %s: %w", act, why, errno)
}
