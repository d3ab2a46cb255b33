// Package sysfs is the only door to the kernel's attribute files: /sys, the
// VFIO device nodes under /dev/vfio and the open files listed in /proc. Every path handed to an FS is absolute as
// seen on a real host ("/sys/bus/pci/devices/0000:03:00.0/sriov_numvfs"); the
// FS decides where that lives: under "/" in production, under a mount point
// for the simulated host, or in memory for the fake kernel.
package sysfs
