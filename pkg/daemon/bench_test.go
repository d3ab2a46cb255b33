package daemon

import (
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/internal/benchstat"
	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
)

// BenchmarkAllocateReleaseOverSocket is one reserve and one unreserve of a
// vGPU through the client and the unix socket, each committed to the
// ledger (fsynced).
func BenchmarkAllocateReleaseOverSocket(b *testing.B) {
	r := start(b, simkernel.NewExample(b, "mi25.yaml"), "version: v1\ngpus:\n  - address: \"0000:03:00.0\"\n    profile: mi25-1g\n")
	var ds []time.Duration
	for b.Loop() {
		t := time.Now()
		if _, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "bench", Profile: "mi25-1g", Count: 1}); err != nil {
			b.Fatal(err)
		}
		if _, err := r.c.Unreserve(bg, domA, ""); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t))
	}
	benchstat.Quantiles(b, ds, "")
}
