package simhost

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/internal/simkernel"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// The price of one sysfs read and one write through vgpusim (the real
// binary, over FUSE, via sysfs.NewOS as vgpuctl reads) next to the same
// operation on the in-process fake. Both go through the bus symlink, as
// the binaries do. The write sets sriov_numvfs to the value it has, which
// the kernel accepts without change, so every iteration does the same.
const (
	benchRead  = "/sys/bus/pci/devices/" + mi25 + "/sriov_totalvfs"
	benchWrite = "/sys/bus/pci/devices/" + mi25 + "/sriov_numvfs"
)

func inProcess(b *testing.B) sysfs.FS {
	b.Helper()
	h, err := simkernel.LoadHost(filepath.Join(built.repo, "examples", "hosts", "mixed.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	k, err := simkernel.New(h)
	if err != nil {
		b.Fatal(err)
	}
	return k
}

func overFUSE(b *testing.B) sysfs.FS {
	b.Helper()
	return startSim(b, "mixed.yaml").FS()
}

// measure runs op b.N times and reports the median and the 99th
// percentile next to the mean (ns/op), so that a few slow outliers (a GC,
// a scheduler hiccup in the FUSE server) do not hide the typical cost.
func measure(b *testing.B, op func() error) {
	b.Helper()
	if err := op(); err != nil { // warm the path; fail early
		b.Fatal(err)
	}
	times := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "median-ns")
	b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds()), "p99-ns")
}

func read(f sysfs.FS) func() error {
	return func() error { _, err := f.ReadFile(benchRead); return err }
}

func write(f sysfs.FS) func() error {
	return func() error { return f.WriteFile(benchWrite, []byte("0")) }
}

func BenchmarkReadInProcess(b *testing.B)  { measure(b, read(inProcess(b))) }
func BenchmarkReadFUSE(b *testing.B)       { measure(b, read(overFUSE(b))) }
func BenchmarkWriteInProcess(b *testing.B) { measure(b, write(inProcess(b))) }
func BenchmarkWriteFUSE(b *testing.B)      { measure(b, write(overFUSE(b))) }
