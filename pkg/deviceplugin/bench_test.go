package deviceplugin_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/internal/benchstat"
	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/deviceplugin/kubelettest"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// mi25x64 is vgpud in process on a host of 64 MI25s carved mi25-1g (1024
// vGPUs), serving a fake kubelet that has the list.
func mi25x64(b *testing.B) (*node, []string) {
	b.Helper()
	h := simkernel.Host{Version: simkernel.HostVersion, NUMANodes: 2}
	for i := range 64 {
		h.GPUs = append(h.GPUs, simkernel.HostGPU{Model: simkernel.ModelMI25, Address: pci.MustParseAddress(fmt.Sprintf("0000:%02x:00.0", 0x10+i)), NUMANode: i % 2})
	}
	n := newNodeFor(b, h, "  - all: true\n    profile: mi25-1g\n")
	n.every = time.Hour // no PodResources look during the timings
	n.start()
	ids := ids(n.vgpusOf("mi25-1g"))
	if len(ids) != 1024 {
		b.Fatalf("%d vGPUs, want 1024", len(ids))
	}
	n.kube.WaitList(domain+"/mi25-1g", "listed", kubelettest.AllHealthy(ids))
	return n, ids
}

// cpuTime is the CPU time this process (every goroutine: vgpud's and the
// fake kubelet's) has used: a figure a busy shared machine inflates far
// less than wall time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAllocate64x16 is the kubelet's Allocate of one VF over gRPC on
// a host of 64 GPUs x 16 vGPUs: claimed in the ledger (fsynced), made
// ready, answered. The claim is freed between samples, untimed. cpu-ms is
// the process's CPU time during the calls (vgpud, its relists for the
// kubelet and the fake kubelet together).
func BenchmarkAllocate64x16(b *testing.B) {
	n, ids := mi25x64(b)
	const res = domain + "/mi25-1g"
	var ds []time.Duration
	var cpu time.Duration
	i := 0
	for b.Loop() {
		id := ids[i%len(ids)]
		i += 17 // another GPU each time
		t, c := time.Now(), cpuTime(b)
		cr, err := n.kube.Allocate(res, id)
		ds, cpu = append(ds, time.Since(t)), cpu+cpuTime(b)-c
		if err != nil || cr.Envs["PCI_RESOURCE_VGPU_EXAMPLE_ORG_MI25-1G"] != id {
			b.Fatalf("Allocate %s = %v, %v", id, cr, err)
		}
		a, ok := n.held(id)
		if !ok {
			b.Fatalf("%s not held after Allocate", id)
		}
		if _, err := n.c.Unreserve(bg, a.Claim, ""); err != nil {
			b.Fatal(err)
		}
	}
	benchstat.Quantiles(b, ds, "")
	b.ReportMetric(float64(cpu)/1e6/float64(len(ds)), "cpu-ms/alloc")
}

// BenchmarkCarveToListAndWatch is the time from a carve of one GPU (16
// VFs) on a host of 64 until the kubelet's ListAndWatch stream carries its
// vGPUs: from the carve's answer (after-carve-), and from its request
// (the carve itself included). The GPU is uncarved between samples,
// untimed.
func BenchmarkCarveToListAndWatch(b *testing.B) {
	n, ids := mi25x64(b)
	const res = domain + "/mi25-1g"
	const gpu = "0000:4f:00.0" // the last one
	var total, after []time.Duration
	var cpu time.Duration
	count := func(want int) func(kubelettest.State) bool {
		return func(s kubelettest.State) bool { return len(s.Lists[res]) == want }
	}
	for b.Loop() {
		if _, err := n.c.Uncarve(bg, api.UncarveRequest{GPU: gpu}); err != nil {
			b.Fatal(err)
		}
		n.kube.Wait("the uncarved GPU's vGPUs gone", count(len(ids)-16))
		t, c := time.Now(), cpuTime(b)
		if _, err := n.c.Carve(bg, api.CarveRequest{GPU: gpu, Profile: "mi25-1g"}); err != nil {
			b.Fatal(err)
		}
		carved := time.Now()
		n.kube.Wait("the carved GPU's vGPUs listed", count(len(ids)))
		total = append(total, time.Since(t))
		after = append(after, time.Since(carved))
		cpu += cpuTime(b) - c
	}
	b.ReportMetric(float64(cpu)/1e6/float64(len(total)), "cpu-ms/carve")
	benchstat.Quantiles(b, after, "after-carve-")
	benchstat.Quantiles(b, total, "")
}
