// Package vfio is a minimal VFIO user for the lab: it opens a device the way
// QEMU does before using it (group, container, type1v2 IOMMU, device fd), so
// the lab's tests hold devices exactly as a running VM holds them.
package vfio

import (
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// VFIO uAPI (include/uapi/linux/vfio.h): _IO(';', 100 + n).
const (
	vfioGetAPIVersion     = 0x3b64
	vfioCheckExtension    = 0x3b65
	vfioSetIOMMU          = 0x3b66
	vfioGroupGetStatus    = 0x3b67
	vfioGroupSetContainer = 0x3b68
	vfioGroupGetDeviceFD  = 0x3b6a

	vfioAPIVersion    = 0
	vfioType1v2IOMMU  = 3
	vfioGroupViable   = 1 << 0
	vfioGroupContSet  = 1 << 1
	vfioDeviceNameMax = 64
)

// Session is a VFIO user holding a device: group and container open,
// IOMMU set, device fd obtained, as QEMU does before it uses a device.
type Session struct {
	group, container, device *os.File
}

// Close lets go of the device, the group and the container.
func (s *Session) Close() error {
	var first error
	for _, f := range []*os.File{s.device, s.group, s.container} {
		if f != nil {
			if err := f.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Open walks the VFIO uAPI for the device at devDir, whose name in its
// group is name (a PCI address or an mdev UUID): the group node opens and
// is viable, the container takes the type1v2 IOMMU, the device fd opens.
func Open(devDir, name string) (*Session, error) {
	l, err := os.Readlink(devDir + "/iommu_group")
	if err != nil {
		return nil, fmt.Errorf("%s: no IOMMU group: %w", devDir, err)
	}
	node := "/dev/vfio/" + filepath.Base(l)
	s := &Session{}
	fail := func(err error) (*Session, error) { _ = s.Close(); return nil, err }
	if s.group, err = os.OpenFile(node, os.O_RDWR, 0); err != nil {
		return fail(fmt.Errorf("open %s: %w", node, err))
	}
	status := struct{ argsz, flags uint32 }{argsz: 8}
	if err := ioctlPtr(s.group, vfioGroupGetStatus, unsafe.Pointer(&status)); err != nil {
		return fail(fmt.Errorf("%s: VFIO_GROUP_GET_STATUS: %w", node, err))
	}
	if status.flags&vfioGroupViable == 0 {
		return fail(fmt.Errorf("%s: group not viable (flags %#x): a member is not on a VFIO driver", node, status.flags))
	}
	if s.container, err = os.OpenFile("/dev/vfio/vfio", os.O_RDWR, 0); err != nil {
		return fail(fmt.Errorf("open /dev/vfio/vfio: %w", err))
	}
	if v, err := ioctlInt(s.container, vfioGetAPIVersion, 0); err != nil || v != vfioAPIVersion {
		return fail(fmt.Errorf("VFIO_GET_API_VERSION: %d, %v", v, err))
	}
	if v, err := ioctlInt(s.container, vfioCheckExtension, vfioType1v2IOMMU); err != nil || v != 1 {
		return fail(fmt.Errorf("VFIO_CHECK_EXTENSION(TYPE1v2): %d, %v (is vfio_iommu_type1 loaded?)", v, err))
	}
	fd := int32(s.container.Fd())
	if err := ioctlPtr(s.group, vfioGroupSetContainer, unsafe.Pointer(&fd)); err != nil {
		return fail(fmt.Errorf("%s: VFIO_GROUP_SET_CONTAINER: %w", node, err))
	}
	if _, err := ioctlInt(s.container, vfioSetIOMMU, vfioType1v2IOMMU); err != nil {
		return fail(fmt.Errorf("VFIO_SET_IOMMU(TYPE1v2): %w", err))
	}
	cname, err := unix.BytePtrFromString(name)
	if err != nil || len(name) >= vfioDeviceNameMax {
		return fail(fmt.Errorf("device name %q: %v", name, err))
	}
	dfd, err := ioctlInt(s.group, vfioGroupGetDeviceFD, uintptr(unsafe.Pointer(cname)))
	if err != nil {
		return fail(fmt.Errorf("%s: VFIO_GROUP_GET_DEVICE_FD(%s): %w", node, name, err))
	}
	s.device = os.NewFile(uintptr(dfd), "vfio-device-"+name)
	if st, _ := ioctlPtrStatus(s.group, &status); st&vfioGroupContSet == 0 {
		return fail(fmt.Errorf("%s: container not set after VFIO_GROUP_SET_CONTAINER", node))
	}
	return s, nil
}

func ioctlInt(f *os.File, req, arg uintptr) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), req, arg)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func ioctlPtr(f *os.File, req uintptr, p unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), req, uintptr(p))
	if e != 0 {
		return e
	}
	return nil
}

func ioctlPtrStatus(f *os.File, status *struct{ argsz, flags uint32 }) (uint32, error) {
	err := ioctlPtr(f, vfioGroupGetStatus, unsafe.Pointer(status))
	return status.flags, err
}
