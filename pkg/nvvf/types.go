// Package nvvf manages NVIDIA per-VF vGPU types (Ada/Hopper, vGPU 17+ drivers):
// <VF>/nvidia/creatable_vgpu_types and current_vgpu_type.
package nvvf

// VGPUType is a line of creatable_vgpu_types.
type VGPUType struct {
	ID   int    `json:"id"`
	Name string `json:"name"` // "NVIDIA L40S-12Q"
}
