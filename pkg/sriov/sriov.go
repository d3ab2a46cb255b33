// Package sriov reads and changes a physical function's SR-IOV state:
// sriov_totalvfs, sriov_numvfs, the virtfnN and physfn links.
package sriov

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// ErrNotPF: the function has no SR-IOV capability (no sriov_totalvfs).
var ErrNotPF = errors.New("not an SR-IOV physical function")

// VF is one enabled virtual function of a PF.
type VF struct {
	Index   int // N of virtfnN
	Address pci.Address
}

func attr(pf pci.Address, name string) string { return pci.DevicePath(pf) + "/" + name }

// IsPF reports whether a has the SR-IOV capability.
func IsPF(f sysfs.FS, a pci.Address) (bool, error) {
	return sysfs.Exists(f, attr(a, "sriov_totalvfs"))
}

func requirePF(f sysfs.FS, pf pci.Address) error {
	ok, err := IsPF(f, pf)
	if err != nil {
		return err
	}
	if !ok {
		if ok, err := pci.Exists(f, pf); err == nil && !ok {
			return fmt.Errorf("%w %s (no %s)", pci.ErrNoDevice, pf, pci.DevicePath(pf))
		}
		return fmt.Errorf("%s is %w (no %s)", pf, ErrNotPF, attr(pf, "sriov_totalvfs"))
	}
	return nil
}

func readCount(f sysfs.FS, pf pci.Address, name string) (int, error) {
	if err := requirePF(f, pf); err != nil {
		return 0, err
	}
	v, err := sysfs.ReadUint(f, attr(pf, name), 16)
	return int(v), err
}

// TotalVFs is the most VFs pf can enable.
func TotalVFs(f sysfs.FS, pf pci.Address) (int, error) { return readCount(f, pf, "sriov_totalvfs") }

// NumVFs is how many VFs pf has enabled.
func NumVFs(f sysfs.FS, pf pci.Address) (int, error) { return readCount(f, pf, "sriov_numvfs") }

// VFDeviceID is the PCI device id pf's VFs will have (sriov_vf_device, hex
// without 0x). Kernels before 5.9 lack the attribute: fs.ErrNotExist.
func VFDeviceID(f sysfs.FS, pf pci.Address) (uint16, error) {
	if err := requirePF(f, pf); err != nil {
		return 0, err
	}
	v, err := sysfs.ReadHex(f, attr(pf, "sriov_vf_device"), 16)
	return uint16(v), err
}

// VFs lists pf's enabled VFs from its virtfnN links, by index.
func VFs(f sysfs.FS, pf pci.Address) ([]VF, error) {
	if err := requirePF(f, pf); err != nil {
		return nil, err
	}
	names, err := sysfs.Names(f, pci.DevicePath(pf))
	if err != nil {
		return nil, err
	}
	var out []VF
	for _, n := range names {
		idx, ok := strings.CutPrefix(n, "virtfn")
		if !ok {
			continue
		}
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 {
			continue
		}
		link := attr(pf, n)
		base, ok, err := sysfs.LinkBase(f, link)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // removed while we listed
		}
		a, err := pci.ParseAddress(base)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", link, err)
		}
		out = append(out, VF{Index: i, Address: a})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// PhysFn returns the PF of a VF; ok is false when vf is not a VF.
func PhysFn(f sysfs.FS, vf pci.Address) (pci.Address, bool, error) {
	link := pci.DevicePath(vf) + "/physfn"
	base, ok, err := sysfs.LinkBase(f, link)
	if err != nil || !ok {
		return pci.Address{}, false, err
	}
	a, err := pci.ParseAddress(base)
	if err != nil {
		return pci.Address{}, false, fmt.Errorf("parse %s: %w", link, err)
	}
	return a, true, nil
}

// Autoprobe reports sriov_drivers_autoprobe: whether new VFs are offered
// to drivers (the PF's own driver may grab them) as soon as they appear.
func Autoprobe(f sysfs.FS, pf pci.Address) (bool, error) {
	if err := requirePF(f, pf); err != nil {
		return false, err
	}
	p := attr(pf, "sriov_drivers_autoprobe")
	s, err := sysfs.ReadString(f, p)
	if err != nil {
		return false, err
	}
	switch s {
	case "1":
		return true, nil
	case "0":
		return false, nil
	}
	return false, fmt.Errorf("parse %s: %q is neither 0 nor 1", p, s)
}

// SetAutoprobe sets sriov_drivers_autoprobe for VFs enabled from now on.
func SetAutoprobe(f sysfs.FS, pf pci.Address, on bool) error {
	if err := requirePF(f, pf); err != nil {
		return err
	}
	p := attr(pf, "sriov_drivers_autoprobe")
	v := "0"
	if on {
		v = "1"
	}
	if err := f.WriteFile(p, []byte(v)); err != nil {
		return fmt.Errorf("set VF driver autoprobe of %s to %s via %s: %w", pf, v, p, sysfs.Errno(err))
	}
	return nil
}
