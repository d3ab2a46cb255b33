package nvvf

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// ParamsFile is the vgpu_params file of the NVIDIA vGPU whose device
// directory is dir: an mdev's (/sys/bus/mdev/devices/<uuid>) or a VF's on
// the per-VF driver (/sys/bus/pci/devices/<vf>).
func ParamsFile(dir string) string { return dir + "/nvidia/vgpu_params" }

// SetParams writes NVIDIA's plugin parameters of the vGPU at dir, "name=value,
// ..." as profile.Spec.ParamsLine gives them; "" clears them (the driver
// takes " "), so a vGPU never keeps an earlier profile's. The driver applies
// them when the VM starts and refuses a change while one uses the vGPU.
func SetParams(f sysfs.FS, dir, line string) error {
	p := ParamsFile(dir)
	if line == "" {
		line = " "
	}
	if err := f.WriteFile(p, []byte(line)); err != nil {
		errno := sysfs.Errno(err)
		switch {
		case errors.Is(errno, syscall.ENOENT):
			return fmt.Errorf("set vGPU plugin parameters %q via %s: %w (not an NVIDIA vGPU, or its driver has no vgpu_params)", line, p, errno)
		case errors.Is(errno, syscall.EBUSY):
			return fmt.Errorf("set vGPU plugin parameters %q via %s: a VM uses the vGPU: %w", line, p, errno)
		}
		return fmt.Errorf("set vGPU plugin parameters %q via %s: %w", line, p, errno)
	}
	return nil
}
