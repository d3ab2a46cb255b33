package daemon

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/internal/benchstat"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/engine"
)

// BenchmarkAllocateReleaseOverSocket is one reserve and one unreserve of a
// vGPU through the client and the unix socket, each committed to the
// ledger (fsynced).
func BenchmarkAllocateReleaseOverSocket(b *testing.B) {
	dir := shortTemp(b)
	k := newKernel(b, "mi25.yaml")
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := engine.WriteConfig(cfgPath, []byte("version: v1\ngpus:\n  - address: \"0000:03:00.0\"\n    profile: mi25-1g\n")); err != nil {
		b.Fatal(err)
	}
	r := &rig{k: k, cfgPath: cfgPath, stateDir: filepath.Join(dir, "state"), socket: filepath.Join(dir, "vgpud.sock")}
	r.runB(b)
	defer r.stopB(b)
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
