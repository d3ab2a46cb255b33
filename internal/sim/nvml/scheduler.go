package simnvml

import (
	"encoding/binary"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The vGPU scheduler, as nvml.h documents nvmlDeviceSetVgpuSchedulerState:
// NOT_SUPPORTED with MIG on or while any vGPU exists on the GPU (the kernel
// joined with SetVGPUs tells), the state kept until the driver reloads. The
// bounds follow NVIDIA's RmPVMRL fields (docs/vendors/nvidia.md, "The vGPU scheduler"): time slice 1-30
// ms, averaging factor 1-60, frequency 63-960 Hz; 0 takes the default.
// With ARR on, the time slice read back is 1/frequency (the fake's choice:
// NVML returns a time slice, never the frequency).

const (
	minTimesliceNS = 1_000_000
	maxTimesliceNS = 30_000_000
)

// SetVGPUs gives the server the kernel's count of vGPUs on a GPU
// (simkernel.Kernel.VGPUs); without it no vGPU ever exists.
func (s *Server) SetVGPUs(count func(bus string) int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vgpus = count
}

// GetVgpuSchedulerState returns the policy, ARR mode and parameters.
func (d *Device) GetVgpuSchedulerState() (nvml.VgpuSchedulerGetState, nvml.Return) {
	var st nvml.VgpuSchedulerGetState
	if r := d.lock(); r != nvml.SUCCESS {
		d.unlock()
		return st, r
	}
	defer d.unlock()
	if d.migOn() || d.noVGPU() {
		return st, nvml.ERROR_NOT_SUPPORTED
	}
	st.SchedulerPolicy, st.ArrMode = d.schedPolicy, d.schedARR
	if st.SchedulerPolicy == 0 {
		st.SchedulerPolicy = nvml.VGPU_SCHEDULER_POLICY_BEST_EFFORT
	}
	p := st.SchedulerParams[:]
	if d.schedARR == nvml.VGPU_SCHEDULER_ARR_ENABLE {
		ts := uint32(0)
		if d.schedFrequency > 0 {
			ts = 1_000_000_000 / d.schedFrequency
		}
		binary.NativeEndian.PutUint32(p[0:4], d.schedAvgFactor)
		binary.NativeEndian.PutUint32(p[4:8], ts)
	} else {
		binary.NativeEndian.PutUint32(p[0:4], d.schedTimeslice)
	}
	return st, nvml.SUCCESS
}

// SetVgpuSchedulerState sets them, refusing as the driver does.
func (d *Device) SetVgpuSchedulerState(st *nvml.VgpuSchedulerSetState) nvml.Return {
	vgpus, r := d.lockCounting()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return r
	}
	if st == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if d.migOn() || vgpus > 0 || d.noVGPU() {
		return nvml.ERROR_NOT_SUPPORTED
	}
	if d.hetero && st.SchedulerPolicy == nvml.VGPU_SCHEDULER_POLICY_FIXED_SHARE {
		return nvml.ERROR_NOT_SUPPORTED // not in mixed-size mode (heterogeneous.go)
	}
	switch st.SchedulerPolicy {
	case nvml.VGPU_SCHEDULER_POLICY_BEST_EFFORT, nvml.VGPU_SCHEDULER_POLICY_EQUAL_SHARE, nvml.VGPU_SCHEDULER_POLICY_FIXED_SHARE:
	default:
		return nvml.ERROR_INVALID_ARGUMENT
	}
	p := st.SchedulerParams[:]
	var ts, avg, freq uint32
	switch st.EnableARRMode {
	case nvml.VGPU_SCHEDULER_ARR_ENABLE:
		avg, freq = binary.NativeEndian.Uint32(p[0:4]), binary.NativeEndian.Uint32(p[4:8])
		if avg > 60 || freq != 0 && (freq < 63 || freq > 960) {
			return nvml.ERROR_INVALID_ARGUMENT
		}
	case nvml.VGPU_SCHEDULER_ARR_DEFAULT, nvml.VGPU_SCHEDULER_ARR_DISABLE:
		ts = binary.NativeEndian.Uint32(p[0:4])
		if ts != 0 && (ts < minTimesliceNS || ts > maxTimesliceNS) {
			return nvml.ERROR_INVALID_ARGUMENT
		}
	default:
		return nvml.ERROR_INVALID_ARGUMENT
	}
	d.schedPolicy, d.schedARR = st.SchedulerPolicy, st.EnableARRMode
	d.schedTimeslice, d.schedAvgFactor, d.schedFrequency = ts, avg, freq
	return nvml.SUCCESS
}
