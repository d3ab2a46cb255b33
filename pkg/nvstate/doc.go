// Package nvstate is NVIDIA GPU state that NVML alone shows and sets: MIG mode
// and GPU instances for MIG-backed vGPU, the time-sliced vGPU scheduler and
// mixed-size mode. The interface is all the rest of vgpu sees, and
// pure Go (vgpu-hook links pkg/carve); its NVML implementation, in
// nvmlstate, needs cgo and loads libnvidia-ml only when first called, so a
// host without the library, or a static build, serves every other GPU.
package nvstate
