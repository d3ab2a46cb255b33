package sriov

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
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

// readCount reads a PF's count. The kernel is asked first and the reason
// looked for only when it fails: each access is a round trip on a
// simulated host, and a prepare reads every count of its GPU.
func readCount(f sysfs.FS, pf pci.Address, name string) (int, error) {
	v, err := sysfs.ReadUint(f, attr(pf, name), 16)
	if errors.Is(err, fs.ErrNotExist) {
		if perr := requirePF(f, pf); perr != nil {
			return 0, perr
		}
	}
	return int(v), err
}

// PFTotalVFs is TotalVFs of a function that may be no PF (ok false), in
// one access.
func PFTotalVFs(f sysfs.FS, pf pci.Address) (total int, ok bool, err error) {
	v, err := sysfs.ReadUint(f, attr(pf, "sriov_totalvfs"), 16)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	return int(v), err == nil, err
}

// TotalVFs is the most VFs pf can enable.
func TotalVFs(f sysfs.FS, pf pci.Address) (int, error) { return readCount(f, pf, "sriov_totalvfs") }

// NumVFs is how many VFs pf has enabled.
func NumVFs(f sysfs.FS, pf pci.Address) (int, error) { return readCount(f, pf, "sriov_numvfs") }

// VFDeviceID is the PCI device id pf's VFs will have (sriov_vf_device, hex
// without 0x). Kernels before 5.9 lack the attribute: fs.ErrNotExist.
func VFDeviceID(f sysfs.FS, pf pci.Address) (uint16, error) {
	v, err := sysfs.ReadHex(f, attr(pf, "sriov_vf_device"), 16)
	if errors.Is(err, fs.ErrNotExist) {
		if perr := requirePF(f, pf); perr != nil {
			return 0, perr
		}
	}
	return uint16(v), err
}

// VFs lists pf's enabled VFs from its virtfnN links, by index.
func VFs(f sysfs.FS, pf pci.Address) ([]VF, error) {
	names, err := sysfs.Names(f, pci.DevicePath(pf))
	if err != nil {
		return nil, err
	}
	// The listing holds the device's attributes: a PF's sriov_totalvfs.
	if !slices.Contains(names, "sriov_totalvfs") {
		if err := requirePF(f, pf); err != nil {
			return nil, err
		}
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

// VFAddresses lists the addresses pf's VFs have once enabled, VF n at [n],
// for every VF sriov_totalvfs allows, whether enabled or not: PF routing ID
// + First VF Offset + n * VF Stride, as the kernel derives them (pci_iov_virtfn_bus,
// pci_iov_virtfn_devfn), with the offset and stride from sriov_offset and
// sriov_stride (Linux 4.15+). A kernel without them gives the enabled VFs'
// addresses alone (from virtfnN), ok false: the others cannot be known.
func VFAddresses(f sysfs.FS, pf pci.Address) (addrs []pci.Address, ok bool, err error) {
	total, err := TotalVFs(f, pf)
	if err != nil {
		return nil, false, err
	}
	offset, err1 := sysfs.ReadUint(f, attr(pf, "sriov_offset"), 16)
	stride, err2 := sysfs.ReadUint(f, attr(pf, "sriov_stride"), 16)
	if errors.Is(err1, fs.ErrNotExist) || errors.Is(err2, fs.ErrNotExist) {
		vfs, err := VFs(f, pf)
		if err != nil {
			return nil, false, err
		}
		for _, vf := range vfs {
			addrs = append(addrs, vf.Address)
		}
		return addrs, false, nil
	}
	if err := errors.Join(err1, err2); err != nil {
		return nil, false, err
	}
	rid := int(pf.Bus)<<8 | int(pf.Device)<<3 | int(pf.Function)
	for n := range total {
		r := rid + int(offset) + n*int(stride)
		if r > 0xffff { // past the last bus: the kernel refuses to enable it
			break
		}
		addrs = append(addrs, pci.Address{Domain: pf.Domain, Bus: uint8(r >> 8), Device: uint8(r>>3) & 0x1f, Function: uint8(r) & 7})
	}
	return addrs, true, nil
}

// AutoprobeRecord is a PF's sriov_drivers_autoprobe as it was before a
// change turned it, as a journal keeps it (carve.AutoprobeJournal; vgpud's
// ledger): a record still open after a crash names what to put back.
type AutoprobeRecord struct {
	ID  uint64
	PF  pci.Address
	Was bool
}
