// Command vgpu-hook is libvirt's QEMU hook for vgpu, installed as
// /etc/libvirt/hooks/qemu.d/vgpu by `vgpuctl hook install`. libvirt runs it
// as `vgpu DOMAIN OPERATION SUBOPERATION EXTRA` with the domain XML on
// stdin; pkg/hook decides what to do and asks vgpud over its socket
// (/run/vgpud/vgpud.sock; $VGPU_SOCKET when set). It is built without cgo
// and never calls libvirt.
package main
