package simnvml

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
)

// VgpuType is one supported vGPU type (nvmlVgpuTypeId); it implements
// nvmlstate.VgpuType, its id and name. The L40S's, H100's and A30's are the ids and names
// the fake kernel's VFs list (internal/sim/kernel l40sTypes, fakeIDTypes):
// NVML's type ids are the ones creatable_vgpu_types shows. NVML lists the
// MIG-backed types too, whatever instances exist.
type VgpuType struct {
	id   uint32
	name string
}

// l40sVGPUTypes are the L40S's B and Q types, 1145 to 1156.
func l40sVGPUTypes() []VgpuType {
	var out []VgpuType
	id := uint32(1145)
	for _, gb := range []int{1, 2} {
		out = append(out, VgpuType{id: id, name: fmt.Sprintf("NVIDIA L40S-%dB", gb)})
		id++
	}
	for _, gb := range []int{1, 2, 3, 4, 6, 8, 12, 16, 24, 48} {
		out = append(out, VgpuType{id: id, name: fmt.Sprintf("NVIDIA L40S-%dQ", gb)})
		id++
	}
	return out
}

// kernelTypes are the types the fake kernel's VFs of model list, with the
// same ids: the H100's and A30's are the fake's own (simkernel
// fakeIDTypes), not NVIDIA's, which no public source gives.
func kernelTypes(model string) []VgpuType {
	var out []VgpuType
	for _, t := range simkernel.VGPUTypes(model) {
		out = append(out, VgpuType{id: uint32(t.ID), name: t.Name})
	}
	return out
}

// GetSupportedVgpus lists the GPU's vGPU types (none, or a driver without
// vGPU: NOT_SUPPORTED).
func (d *Device) GetSupportedVgpus() ([]nvmlstate.VgpuType, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return nil, r
	}
	if len(d.m.vgpuTypes) == 0 || d.noVGPU() {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	out := make([]nvmlstate.VgpuType, len(d.m.vgpuTypes))
	for i, t := range d.m.vgpuTypes {
		out[i] = t
	}
	return out, nvml.SUCCESS
}

// GetID is the type's id.
func (t VgpuType) GetID() uint32 { return t.id }

// GetName is the type's name.
func (t VgpuType) GetName() (string, nvml.Return) { return t.name, nvml.SUCCESS }
