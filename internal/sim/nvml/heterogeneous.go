package simnvml

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// vGPU heterogeneous (mixed-size) mode, as nvml.h documents
// nvmlDevice{Get,Set}VgpuHeterogeneousMode: both answer NOT_SUPPORTED with
// MIG on or on a GPU without the feature; Set answers IN_USE while any vGPU
// exists on the GPU (on KVM any mdev; here also any VF with a type, as
// cubecos measured "In use by another client" from nvidia-smi vgpu -shm on
// a vendor-VFIO host; the kernel joined with SetVGPUs counts them). The
// mode is off at driver load and does not persist: sriov-manage's rebind
// (DriverRebind) and a GPU reset (ResetGPU) turn it off (NVIDIA AI
// Enterprise 5 user guide §2.9; cubecos PR #1338). The fixed-share
// scheduler is not supported in it (the same guide): the fake refuses that
// scheduler while the mode is on, and the mode while that scheduler is set,
// with NOT_SUPPORTED (the code is the fake's choice; no source gives it).

// GetVgpuHeterogeneousMode reads the mode.
func (d *Device) GetVgpuHeterogeneousMode() (nvml.VgpuHeterogeneousMode, nvml.Return) {
	out := nvml.VgpuHeterogeneousMode{Version: 1}
	if r := d.lock(); r != nvml.SUCCESS {
		d.unlock()
		return out, r
	}
	defer d.unlock()
	if d.migOn() || !d.m.mixedSize || d.noVGPU() {
		return out, nvml.ERROR_NOT_SUPPORTED
	}
	if d.hetero {
		out.Mode = uint32(nvml.FEATURE_ENABLED)
	}
	return out, nvml.SUCCESS
}

// SetVgpuHeterogeneousMode sets it, refusing as the driver does.
func (d *Device) SetVgpuHeterogeneousMode(m nvml.VgpuHeterogeneousMode) nvml.Return {
	vgpus, r := d.lockCounting()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return r
	}
	switch {
	case m.Mode != uint32(nvml.FEATURE_ENABLED) && m.Mode != uint32(nvml.FEATURE_DISABLED):
		return nvml.ERROR_INVALID_ARGUMENT
	case d.migOn() || !d.m.mixedSize || d.noVGPU():
		return nvml.ERROR_NOT_SUPPORTED
	case vgpus > 0:
		return nvml.ERROR_IN_USE
	case m.Mode == uint32(nvml.FEATURE_ENABLED) && d.schedPolicy == nvml.VGPU_SCHEDULER_POLICY_FIXED_SHARE:
		return nvml.ERROR_NOT_SUPPORTED
	}
	d.hetero = m.Mode == uint32(nvml.FEATURE_ENABLED)
	return nvml.SUCCESS
}

// Heterogeneous reports whether the GPU at bus is in mixed-size mode, for
// the fake kernel: its VFs then take types of any size that fits.
func (s *Server) Heterogeneous(bus string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.device(bus)
	return err == nil && d.hetero && !d.migOn()
}
