// Package fusefs serves a simkernel.Kernel as a real filesystem over FUSE,
// so that unmodified binaries run against the fake kernel with
// --sysfs-root MNT: MNT/sys/bus/pci/devices/..., MNT/dev/vfio/N.
//
// It behaves as sysfs does, within what FUSE allows:
//
//   - Nothing is cached: entry, attribute and negative timeouts are 0 and
//     every file is opened direct_io, because VFs and mdevs appear and
//     vanish with each write and a stale page would lie.
//   - A read at offset 0 calls the attribute's show again; later offsets
//     read from that result, as seq_file does for one open file.
//   - Each write(2) is one kernel write, whatever its offset (sysfs ignores
//     it); writes over 4096 bytes fail E2BIG; errors are the kernel's errno.
//   - Inode numbers are the kernel's, one per node as kernfs numbers
//     them: a node made again at the same path (a parent bound anew, its
//     mdev_supported_types with it) gets a new number.
//   - Attributes report size 4096 and the kernel's modes; opening for
//     writing what has no store (or for reading what has no show) is
//     EACCES, as kernfs checks even for root.
//   - /dev/vfio/N is a regular file here: FUSE cannot serve a character
//     device (its open would go to the host's driver). Opening it takes the
//     VFIO group through Kernel.Open until release, so a second opener
//     gets EBUSY. The kernel sends FUSE's release after close(2) returns:
//     a caller that closes and at once expects the group free should wait
//     for Kernel.OpenCount to drop.
//   - A write that blocks in the kernel (sriov_numvfs=0 while a group is
//     open) blocks only its own request; go-fuse serves each request on
//     its own goroutine.
//
// Holds (see Holds) make a chosen write wait before it reaches the kernel,
// so a test can kill a process in the middle of a step.
package fusefs
