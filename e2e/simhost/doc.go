// Package simhost holds process-level tests: the real vgpusim and vgpuctl
// binaries, built by TestMain, run against a simulated host mounted over
// FUSE, and Debian's mdevctl runs against the same mount. They need root
// and /dev/fuse, and fail (not skip) without them. The package also holds
// the benchmarks that price a sysfs read and write through vgpusim next
// to the in-process fake.
package simhost
