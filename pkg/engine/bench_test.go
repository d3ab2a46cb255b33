package engine

import (
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/internal/benchstat"
)

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
	benchstat.Quantiles(b, ds, "")
}
