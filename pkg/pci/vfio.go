package pci

import (
	"fmt"
	"sort"
	"strconv"

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

// VFIOPCI is the generic VFIO PCI driver.
const VFIOPCI = "vfio-pci"

// IsVFIODriver reports whether a device on driver is handed to VMs
// through VFIO: vfio-pci or a vfio_pci_core variant vgpu binds
// (xe-vfio-pci, Intel xe's VFs with migration).
func IsVFIODriver(driver string) bool {
	switch driver {
	case VFIOPCI, "xe-vfio-pci":
		return true
	}
	return false
}
