// Package hook is the decision logic of vgpu-hook, the script libvirt runs
// as /etc/libvirt/hooks/qemu.d/vgpu for every QEMU domain it starts, stops,
// migrates or restores:
//
//	vgpu DOMAIN OPERATION SUBOPERATION EXTRA   (domain XML on stdin)
//
// prepare/begin asks the agent to make the domain's vGPUs ready,
// release/end to release them, migrate/begin and restore/begin to lease
// vGPUs on this host and print the domain XML with its hostdev sources
// pointed at them (a probe from vgpuctl migrate --dry-run gets an answer
// and a refusal instead). Everything else exits 0 untouched.
//
// The hook never calls libvirt (libvirt waits for it: a call back would
// deadlock), links no cgo, and lets a domain without a vGPU request pass
// without parsing its XML or contacting anything.
package hook
