package simhost

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
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
	return simkernel.NewExample(b, "mixed.yaml")
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

// benchRounds is how many times BenchmarkGPUs64 runs each command per
// iteration: medians need several samples, and one round of three commands
// on 64 GPUs through FUSE takes seconds.
const benchRounds = 7

// BenchmarkGPUs64 times `vgpuctl gpus`, the process, on a simulated host of
// 64 NVIDIA H100s on the vGPU host driver, as after a boot (no VFs, so the
// table asks NVML nothing), against the same command without PCI names (--pci-ids
// /dev/null) and against `vgpuctl --version`, the process's start. The
// commands alternate, benchRounds times per iteration; ns/op is the median
// of `gpus`, names-ms what looking up the names in pci.ids adds to it.
// FUSE dominates here (docs/benchmarks.md): the ratio to nvidia-smi -L is
// taken on a real host with scripts/real-host-check.sh.
func BenchmarkGPUs64(b *testing.B) {
	var host strings.Builder
	host.WriteString("version: v1\nnumaNodes: 2\ngpus:\n")
	for i := range 64 {
		fmt.Fprintf(&host, "  - model: h100-vf\n    address: \"0000:%02x:00.0\"\n    numaNode: %d\n", 0x10+2*i, i%2)
	}
	path := filepath.Join(b.TempDir(), "h100x64.yaml")
	if err := os.WriteFile(path, []byte(host.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	s := startSimAt(b, path)
	var out gpusJSON
	s.vgpuctl("gpus", "-o", "json").ok(b).decode(b, &out)
	if len(out.GPUs) != 64 || out.GPUs[0].DeviceName == "0x2331" {
		b.Fatalf("vgpuctl gpus lists %d GPUs, the first named %q; want 64 H100s with pci.ids' name", len(out.GPUs), out.GPUs[0].DeviceName)
	}
	cmds := []struct {
		key  string
		args []string
	}{{"gpus", []string{"gpus"}}, {"no-names", []string{"gpus", "--pci-ids", "/dev/null"}}, {"version", []string{"--version"}}}
	times := map[string][]time.Duration{}
	b.ResetTimer()
	for range b.N {
		for range benchRounds {
			for _, c := range cmds {
				start := time.Now()
				s.vgpuctl(c.args...).ok(b)
				times[c.key] = append(times[c.key], time.Since(start))
			}
		}
	}
	b.StopTimer()
	med := map[string]time.Duration{}
	for k, ts := range times {
		slices.Sort(ts)
		med[k] = ts[len(ts)/2]
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(float64(med["gpus"].Nanoseconds()), "ns/op")
	b.ReportMetric(ms(med["gpus"]), "median-ms")
	b.ReportMetric(ms(med["no-names"]), "no-names-ms")
	b.ReportMetric(ms(med["gpus"]-med["no-names"]), "names-ms")
	b.ReportMetric(ms(med["version"]), "version-ms")
	b.ReportMetric(float64(med["gpus"])/float64(med["no-names"]), "x-no-names")
}
