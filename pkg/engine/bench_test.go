package engine

import (
	"slices"
	"testing"
	"time"
)

// reportQuantiles adds the median and p99 of ds, in milliseconds.
func reportQuantiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	q := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), "median-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// BenchmarkReconcileNoop64x16 reconciles a host of 64 MI25s carved
// mi25-1g (1024 vGPUs) that is already as the config wants.
func BenchmarkReconcileNoop64x16(b *testing.B) {
	e, _ := mi25Host(b, 64)
	var ds []time.Duration
	for b.Loop() {
		t := time.Now()
		rep := e.Reconcile(bg, ReasonAPI)
		ds = append(ds, time.Since(t))
		if rep.Changed != 0 || !rep.OK() {
			b.Fatalf("a no-op reconcile changed %d GPUs", rep.Changed)
		}
	}
	reportQuantiles(b, ds)
}
