// Package vgpudm reads the config files of NVIDIA's vgpu-device-manager
// (github.com/NVIDIA/vgpu-device-manager, api/spec/v1): named vgpu-configs,
// each a list of entries that select GPUs (device-filter, devices) and say
// which vGPU types to make on each and how many (vgpu-devices). A file is
// refused where the tool refuses it (spec.go's UnmarshalJSON and
// VGPUConfig.AssertValid), with every problem at once, each with its line.
package vgpudm
