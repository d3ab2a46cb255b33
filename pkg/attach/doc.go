// Package attach gives libvirt domains vGPUs and takes them away: the
// hostdevs and the vgpu request element in a domain's definitions, and
// the reservations vgpud holds for the VFs they name, changed all or
// nothing (a failed step gives back what the steps before it took).
//
// vgpuctl attach and detach are its front door; the domain is
// *virt.Domain (libvirt, cgo) behind the Domain interface, vgpud's ledger
// is behind Reserver (VgpudReserver over its API, nil on a host without
// vgpud). docs/libvirt.md describes the workflow.
package attach
