// Command vgpusim is a simulated GPU host: it serves the project's fake
// kernel (internal/sim/kernel) as a real filesystem over FUSE, so that the
// unmodified binaries run against it with --sysfs-root.
package main
