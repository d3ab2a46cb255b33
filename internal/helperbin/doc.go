// Package helperbin finds the programs vgpu's binaries hand work to: the
// cgo builds that load a C library (vgpuctl-libvirt, vgpu-nvml), kept out
// of the static binaries so that those start without it.
package helperbin
