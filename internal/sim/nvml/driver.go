package simnvml

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// Driver is which NVIDIA driver the fake library belongs to
// (docs/vendors/nvidia.md, "Which driver: the vGPU host driver or
// another"). The zero Driver is the vGPU host driver on bare metal.
type Driver struct {
	// Datacenter: NVIDIA's datacenter driver (or a guest's), which has no
	// vGPU: supported vGPU types, the vGPU scheduler and mixed-size mode
	// answer NOT_SUPPORTED, as they did on the real H200 host; MIG works.
	Datacenter bool
	// Guest: this OS is a VM the GPUs are passed through to
	// (virtualization mode PASSTHROUGH). A guest runs no vGPU host driver.
	Guest bool
}

// SetDriver makes the library the given driver's.
func (s *Server) SetDriver(d Driver) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.Guest {
		d.Datacenter = true
	}
	s.driver = d
}

// noVGPU: the driver has no vGPU. Caller holds the lock.
func (d *Device) noVGPU() bool { return d.s.driver.Datacenter }

// GetVirtualizationMode is PASSTHROUGH in a guest (as the real H200 in a
// VM answered), HOST_VGPU under the vGPU host driver, NONE on bare metal
// otherwise (nvml.h's nvmlGpuVirtualizationMode_t).
func (d *Device) GetVirtualizationMode() (nvml.GpuVirtualizationMode, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	switch {
	case r != nvml.SUCCESS:
		return 0, r
	case d.s.driver.Guest:
		return nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH, nvml.SUCCESS
	case d.noVGPU():
		return nvml.GPU_VIRTUALIZATION_MODE_NONE, nvml.SUCCESS
	}
	return nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU, nvml.SUCCESS
}

// GetHostVgpuMode is NOT_SUPPORTED without the vGPU host driver (the real
// H200 guest's answer); under it SR-IOV for a board whose vGPUs are its
// VFs' (per-VF or MIG-backed types), non-SR-IOV for a PF-mdev board (T4).
func (d *Device) GetHostVgpuMode() (nvml.HostVgpuMode, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	switch {
	case r != nvml.SUCCESS:
		return 0, r
	case d.noVGPU():
		return 0, nvml.ERROR_NOT_SUPPORTED
	case len(d.m.vgpuTypes) > 0 || len(d.m.profiles) > 0:
		return nvml.HOST_VGPU_MODE_SRIOV, nvml.SUCCESS
	}
	return nvml.HOST_VGPU_MODE_NON_SRIOV, nvml.SUCCESS
}
