// Package nvvf manages NVIDIA per-VF vGPU types (Ada/Hopper, vGPU 17+ drivers):
// <VF>/nvidia/creatable_vgpu_types and current_vgpu_type.
package nvvf
