package pci

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"syscall"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// IOMMUGroup returns a's IOMMU group; ok is false when it has none (no
// IOMMU, or the IOMMU is off).
func IOMMUGroup(f sysfs.FS, a Address) (group int, ok bool, err error) {
	return ReadGroupLink(f, DevicePath(a)+"/iommu_group")
}

// ReadGroupLink parses an iommu_group link (PCI functions and mdevs alike);
// ok is false when the link is absent.
func ReadGroupLink(f sysfs.FS, link string) (group int, ok bool, err error) {
	base, ok, err := sysfs.LinkBase(f, link)
	if err != nil || !ok {
		return -1, false, err
	}
	g, err := strconv.Atoi(base)
	if err != nil || g < 0 {
		return -1, false, fmt.Errorf("parse %s: %q is not an IOMMU group number", link, base)
	}
	return g, true, nil
}

// GroupDevicePath is the VFIO node of a group: /dev/vfio/12.
func GroupDevicePath(group int) string { return sysfs.VFIODev + "/" + strconv.Itoa(group) }

// GroupDevices lists the PCI functions in an IOMMU group, sorted. Passing a
// device through means passing its whole group.
func GroupDevices(f sysfs.FS, group int) ([]Address, error) {
	dir := sysfs.IOMMUGroups + "/" + strconv.Itoa(group) + "/devices"
	names, err := sysfs.Names(f, dir)
	if err != nil {
		return nil, err
	}
	out := make([]Address, 0, len(names))
	for _, n := range names {
		a, err := ParseAddress(n)
		if err != nil {
			continue // not PCI (an mdev's group holds its UUID)
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out, nil
}

// GroupInUse reports whether a VFIO user (QEMU) holds the group open. The
// kernel admits one opener per group, so the only way to ask is to try:
// EBUSY means held; a successful open is closed at once; no node means the
// group is not on vfio at all, so nobody can hold it.
//
// Trade-off: for the instant the probe holds the group, a VM starting on it
// would get EBUSY. Call it only under the allocation lock that also guards
// handing the group to a VM, never on a group a VM is being started on.
// It also cannot see users of the iommufd cdev (/dev/vfio/devices/vfioN),
// which do not open the group.
func GroupInUse(f sysfs.FS, group int) (bool, error) {
	p := GroupDevicePath(group)
	c, err := f.OpenDevice(p)
	switch {
	case err == nil:
		if cerr := c.Close(); cerr != nil {
			return false, fmt.Errorf("close %s after probing it: %w", p, cerr)
		}
		return false, nil
	case errors.Is(err, syscall.EBUSY):
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("open %s to see whether a VFIO user holds it: %w", p, sysfs.Errno(err))
	}
}
