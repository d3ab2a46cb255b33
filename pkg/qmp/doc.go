// Package qmp reads from QEMU what libvirt does not expose (migration
// blockers, VFIO migration figures), through go-qemu's QMP types over
// libvirt's monitor passthrough (virDomainQemuMonitorCommand): vgpu never
// opens QEMU's monitor socket itself, which libvirt owns.
package qmp
