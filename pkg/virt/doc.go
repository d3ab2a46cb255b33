// Package virt is vgpu's only door to libvirt (libvirt.org/go/libvirt, cgo):
// connect, find a domain, attach and detach vGPU hostdevs, read the domain
// XML and write our metadata. Everything above it speaks domxml types and
// this package's sentinel errors, never libvirt's.
//
// The types and sentinels of errors.go and affect.go build without cgo, so that a
// CGO_ENABLED=0 vgpuctl can name them; Conn and Domain need cgo and link
// libvirt (docs/libvirt.md, "Who loads libvirt").
package virt
