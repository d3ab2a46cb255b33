// Package simtools holds the vendor host tools of a simulated host, doing
// what the real ones do through a sysfs.FS: the same sysfs writes in the
// same order, the same messages and exit codes. The fake kernel runs them
// in process (simkernel.Kernel.RunTool) and vgpusim as commands.
package simtools
