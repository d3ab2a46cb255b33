// Package nvmlstate is nvstate.Manager over NVIDIA's NVML (go-nvml, cgo): MIG
// mode and GPU instances, the vGPU types, the vGPU scheduler, mixed-size
// mode and the virtualization mode, each call in an NVML session of its
// own. Library is the narrow interface it asks of NVML; go-nvml's library
// and internal/sim/nvml's fake both satisfy it. Without cgo, New's manager
// answers nvstate.ErrUnavailable. vgpu-nvml serves it to vgpud and vgpuctl.
package nvmlstate
