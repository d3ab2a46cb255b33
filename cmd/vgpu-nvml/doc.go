// Command vgpu-nvml loads NVIDIA's NVML (libnvidia-ml.so.1, a C library)
// for vgpud and vgpuctl, which are static and start it when a MIG-backed
// profile, the vGPU scheduler or mixed-size mode needs NVML. It serves
// pkg/nvstate's calls on the socket its parent passes as file descriptor 3 and
// exits when the parent closes it: the library's pages are mapped only
// while it is in use, and a call stuck in the driver kills this process,
// not vgpud. It is not meant to be run by hand.
package main
