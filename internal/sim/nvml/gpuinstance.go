package simnvml

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// GpuInstance is one GPU instance; it implements nvmlstate.GpuInstance. A handle
// turns invalid once its instance is destroyed, as nvml.h says, even if a
// new instance later gets the same ID.
type GpuInstance struct {
	d     *Device
	id    uint32
	p     profile
	start uint32
	inUse bool
	vgpu  bool // a vGPU runs on it (HoldInstance)
}

// valid reports whether the handle still names a live instance. Caller
// holds the lock.
func (gi *GpuInstance) valid() bool { return gi.d.gis[gi.id] == gi }

// GetInfo returns the device, instance ID, profile ID and placement.
func (gi *GpuInstance) GetInfo() (nvml.GpuInstanceInfo, nvml.Return) {
	r := gi.d.lock()
	defer gi.d.unlock()
	if r != nvml.SUCCESS {
		return nvml.GpuInstanceInfo{}, r
	}
	if !gi.valid() {
		return nvml.GpuInstanceInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	return nvml.GpuInstanceInfo{
		Id:        gi.id,
		ProfileId: gi.p.id,
		Placement: nvml.GpuInstancePlacement{Start: gi.start, Size: gi.p.size},
	}, nvml.SUCCESS
}

// Destroy frees the instance's slices unless it is in use.
func (gi *GpuInstance) Destroy() nvml.Return {
	r := gi.d.lock()
	defer gi.d.unlock()
	if r != nvml.SUCCESS {
		return r
	}
	if !gi.valid() {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if gi.inUse || gi.vgpu {
		return nvml.ERROR_IN_USE
	}
	delete(gi.d.gis, gi.id)
	return nvml.SUCCESS
}
