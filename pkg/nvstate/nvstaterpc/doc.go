// Package nvstaterpc carries a nvstate.Manager over HTTP/JSON. vgpud and vgpuctl
// are static, so NVIDIA's NVML (a C library) is loaded by vgpu-nvml, a
// helper process they start on a socket pair (Helper, Exec, ServeConn).
// vgpusim serves its fake NVML the same way on a unix socket, and vgpud and
// vgpuctl pointed at a simulated host (--sysfs-root) use it instead: Open
// picks it when the root holds nvstate.SimSocket.
package nvstaterpc
