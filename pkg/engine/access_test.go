package engine

import (
	"fmt"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// mi25Host is an engine on a host of n MI25s, each carved mi25-1g (16 VFs).
func mi25Host(tb testing.TB, n int) (*Engine, *sysfstest.Counter) {
	tb.Helper()
	h := simkernel.Host{Version: simkernel.HostVersion, NUMANodes: 1}
	for i := range n {
		h.GPUs = append(h.GPUs, simkernel.HostGPU{Model: "mi25", Address: pci.MustParseAddress(fmt.Sprintf("0000:%02x:00.0", 0x10+i))})
	}
	k, err := simkernel.New(h)
	if err != nil {
		tb.Fatal(err)
	}
	var cf *sysfstest.Counter
	r := engineRigOn(tb, k, "version: v1\ngpus:\n  - all: true\n    profile: mi25-1g\n", func(k *simkernel.Kernel) sysfs.FS {
		cf = sysfstest.Count(k)
		return cf
	})
	if rep := r.e.Start(bg); !rep.OK() || rep.Changed != n {
		tb.Fatalf("first reconcile: changed %d, %+v", rep.Changed, rep.Error)
	}
	return r.e, cf
}

// prepareAccesses counts the kernel file accesses of one prepare (and of
// the release after it) of a VF reserved at attach time.
func prepareAccesses(tb testing.TB, gpus int) (prepare, release int64) {
	tb.Helper()
	e, cf := mi25Host(tb, gpus)
	req := alloc.Request{Profile: "mi25-1g", Count: 1, DomainUUID: domA, DomainName: "web01"}
	h, err := e.Reserve(bg, req)
	if err != nil {
		tb.Fatal(err)
	}
	id := h.Allocations[0].VGPU
	cf.Take()
	if _, err := e.Prepare(bg, req, []string{id}); err != nil {
		tb.Fatal(err)
	}
	prepare = int64(len(cf.Take()))
	if _, err := e.Release(bg, domA); err != nil {
		tb.Fatal(err)
	}
	return prepare, int64(len(cf.Take()))
}

// Prepare and release touch only what they hand out: one VF's prepare costs
// as many kernel file accesses on a host of 64 GPUs x 16 vGPUs as on a host
// of one GPU (issue 13).
func TestPrepareTouchesOnlyItsVGPU(t *testing.T) {
	p1, r1 := prepareAccesses(t, 1)
	p64, r64 := prepareAccesses(t, 64)
	t.Logf("prepare: %d accesses on 1 GPU, %d on 64 x 16; release: %d, %d", p1, p64, r1, r64)
	if p64 != p1 {
		t.Errorf("one prepare: %d kernel file accesses on 64 GPUs x 16 vGPUs, %d on one GPU; want the same", p64, p1)
	}
	if r64 != r1 {
		t.Errorf("one release: %d kernel file accesses on 64 GPUs x 16 vGPUs, %d on one GPU; want the same", r64, r1)
	}
}

// BenchmarkPrepareRelease64x16 is one prepare and one release of a
// reserved VF on a host of 64 MI25s x 16 VFs; the table's extra columns
// count their kernel file accesses, which a host of one GPU matches
// (TestPrepareTouchesOnlyItsVGPU).
func BenchmarkPrepareRelease64x16(b *testing.B) {
	e, cf := mi25Host(b, 64)
	req := alloc.Request{Profile: "mi25-1g", Count: 1, DomainUUID: domA, DomainName: "web01"}
	h, err := e.Reserve(bg, req)
	if err != nil {
		b.Fatal(err)
	}
	ids := []string{h.Allocations[0].VGPU}
	var prep, rel int64
	for b.Loop() {
		cf.Take()
		if _, err := e.Prepare(bg, req, ids); err != nil {
			b.Fatal(err)
		}
		prep = int64(len(cf.Take()))
		if _, err := e.Release(bg, domA); err != nil {
			b.Fatal(err)
		}
		rel = int64(len(cf.Take()))
	}
	b.ReportMetric(float64(prep), "prepare-accesses")
	b.ReportMetric(float64(rel), "release-accesses")
}
