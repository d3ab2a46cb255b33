package sysfs

import (
	"io"
	"io/fs"
)

// Well-known locations. No other package spells "/sys".
const (
	PCIDevices      = "/sys/bus/pci/devices"
	PCIDrivers      = "/sys/bus/pci/drivers"
	PCIDriversProbe = "/sys/bus/pci/drivers_probe"
	IOMMUGroups     = "/sys/kernel/iommu_groups"
	MdevBusClass    = "/sys/class/mdev_bus"
	MdevDevices     = "/sys/bus/mdev/devices"
	VFIODev         = "/dev/vfio"
	Modules         = "/sys/module"
	// VFIODevices holds the iommufd cdevs (vfio0, ...) of VFIO devices.
	VFIODevices = "/dev/vfio/devices"
	// Proc is read only to find who holds a VFIO node open (/proc/<pid>/fd).
	Proc = "/proc"
)

// FS is the kernel's attribute filesystem as the rest of vgpu sees it.
// Implementations return errors that unwrap to the kernel's errno
// (errors.Is(err, syscall.EBUSY)) wrapped in *fs.PathError.
type FS interface {
	// ReadFile reads a whole attribute.
	ReadFile(name string) ([]byte, error)
	// WriteFile writes data to an existing attribute in one write(2), as
	// sysfs requires: no create, no truncate.
	WriteFile(name string, data []byte) error
	// ReadDir lists a directory, following symlinks in name.
	ReadDir(name string) ([]fs.DirEntry, error)
	// Readlink returns a symlink's target as stored (sysfs links are relative).
	Readlink(name string) (string, error)
	// Lstat describes name without following a final symlink.
	Lstat(name string) (fs.FileInfo, error)
	// Stat describes name, following symlinks.
	Stat(name string) (fs.FileInfo, error)
	// OpenDevice opens a device node such as /dev/vfio/12 read-write, as a
	// VFIO user would. A VFIO group admits one opener: a second gets EBUSY.
	OpenDevice(name string) (io.Closer, error)
}
