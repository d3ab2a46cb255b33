package carve

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// VFIOUsage reports a vGPU as in use while its VFIO group is open: the
// kernel lets one process (QEMU) hold a group at a time.
type VFIOUsage struct{ FS sysfs.FS }

var _ UsageChecker = VFIOUsage{}

// Holder implements UsageChecker for device addresses and mdev UUIDs.
func (u VFIOUsage) Holder(_ context.Context, vgpu string) (string, bool, error) {
	group, ok, err := u.group(vgpu)
	if err != nil || !ok {
		return "", false, err
	}
	in, err := pci.GroupInUse(u.FS, group)
	if err != nil || !in {
		return "", false, err
	}
	return fmt.Sprintf("%s/%d is open", sysfs.VFIODev, group), true, nil
}

func (u VFIOUsage) group(vgpu string) (int, bool, error) {
	if _, err := uuid.Parse(vgpu); err == nil {
		in, ok, err := mdev.Get(u.FS, vgpu)
		if err != nil || !ok {
			return 0, false, err
		}
		return in.IOMMUGroup, in.IOMMUGroup >= 0, nil
	}
	a, err := pci.ParseAddress(vgpu)
	if err != nil {
		return 0, false, fmt.Errorf("check use of %q: not a PCI address or mdev UUID", vgpu)
	}
	return pci.IOMMUGroup(u.FS, a)
}
