package carve

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// VFIOUsage reports a vGPU as in use while a process (QEMU) holds its VFIO
// group or cdev open. It reads /proc and never opens the node itself: an
// open, however short, would make a VM starting at that moment fail.
type VFIOUsage struct {
	FS sysfs.FS
	// holders is a scan taken by Snapshot; nil scans /proc at each call.
	holders pci.Holders
}

var _ UsageChecker = VFIOUsage{}

// Snapshot scans /proc once for a pass over many vGPUs (a listing, or the
// vGPUs one carve would destroy, taken when it decides).
func (u VFIOUsage) Snapshot() (VFIOUsage, error) {
	h, err := pci.ScanHolders(u.FS)
	if err != nil {
		return u, err
	}
	return VFIOUsage{FS: u.FS, holders: h}, nil
}

// Holder implements UsageChecker for device addresses and mdev UUIDs.
func (u VFIOUsage) Holder(_ context.Context, vgpu string) (string, bool, error) {
	dir, group, ok, err := u.device(vgpu)
	if err != nil || !ok {
		return "", false, err
	}
	hs := u.holders
	if hs == nil {
		if hs, err = pci.ScanHolders(u.FS); err != nil {
			return "", false, fmt.Errorf("check use of %s: %w", vgpu, err)
		}
	}
	of, err := hs.Of(u.FS, dir, group)
	if err != nil || len(of) == 0 {
		return "", false, err
	}
	parts := make([]string, len(of))
	for i, h := range of {
		parts[i] = h.String()
	}
	return strings.Join(parts, ", "), true, nil
}

// device is the sysfs directory and IOMMU group of a vGPU; ok is false when
// it has no group (not on VFIO, or gone).
func (u VFIOUsage) device(vgpu string) (dir string, group int, ok bool, err error) {
	if _, err := uuid.Parse(vgpu); err == nil {
		in, ok, err := mdev.Get(u.FS, vgpu)
		if err != nil || !ok {
			return "", 0, false, err
		}
		return sysfs.MdevDevices + "/" + in.UUID, in.IOMMUGroup, in.IOMMUGroup >= 0, nil
	}
	a, err := pci.ParseAddress(vgpu)
	if err != nil {
		return "", 0, false, fmt.Errorf("check use of %q: not a PCI address or mdev UUID", vgpu)
	}
	group, ok, err = pci.IOMMUGroup(u.FS, a)
	return pci.DevicePath(a), group, ok, err
}
