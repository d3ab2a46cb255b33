//go:build cgo

package carve_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// nameOnlyCarver is a carver with NVML (simnvml) on the L40S of
// nameOnlyL40S, whose catalog names site-l40s-12q's type only.
func nameOnlyCarver(t *testing.T) (*profile.Catalog, *simkernel.Kernel, *carve.Carver, nvstate.Manager) {
	t.Helper()
	dir, cat, k := nameOnlyL40S(t)
	nv, err := simnvml.New(simnvml.GPU{Model: simnvml.ModelL40S, BusID: gpuAddr["l40s"].String()})
	if err != nil {
		t.Fatal(err)
	}
	m := nvmlstate.NewWith(nv, "simnvml")
	c := carve.New(sysfstest.Record(k), cat, carve.NewFileDriverStore(filepath.Join(dir, "drivers.json")),
		carve.WithToolRetry(3, time.Millisecond), carve.WithMIG(m))
	return cat, k, c, m
}

// With NVML, a type the catalog gives by name only takes its id from
// NVML's supported types: the carve needs no VF to list it first, and the
// GPU is recognised as carrying the profile once its vGPUs fill it.
func TestCarveNameOnlyTypeByNVML(t *testing.T) {
	ctx := context.Background()
	cat, k, c, _ := nameOnlyCarver(t)
	addr := gpuAddr["l40s"]
	if _, err := c.Carve(ctx, vgpu.GPU(addr), "site-l40s-12q", carve.Options{}); err != nil {
		t.Fatalf("carve with NVML, no VF enabled: %v", err)
	}
	g, err := inventory.Get(k, nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	set := 0
	for _, vf := range g.SRIOV.VFs {
		if vf.NVIDIA != nil && vf.NVIDIA.CurrentType == 1153 {
			set++
		}
	}
	if set != 4 {
		t.Fatalf("%d VFs carry 1153 (NVIDIA L40S-12Q), want 4", set)
	}
	if carve.Carries(g, cat, "site-l40s-12q") {
		t.Fatal("without NVML's types a full GPU already counts as carrying it: the test proves nothing")
	}
	c.Enrich(&g)
	if !carve.Carries(g, cat, "site-l40s-12q") {
		t.Fatalf("with NVML's types the full GPU does not carry site-l40s-12q (types %v)", g.NVIDIATypes)
	}
	if again, err := c.Carve(ctx, vgpu.GPU(addr), "site-l40s-12q", carve.Options{}); err != nil || !again.Plan.Empty() {
		t.Fatalf("the same carve again: %v\n%s", err, again.Plan)
	}
}

// EnrichWith, vgpuctl's one-off look: a full GPU whose type the catalog
// names only is recognised once NVML lists the types; an NVML that fails
// leaves the GPU as sysfs shows it.
func TestEnrichWith(t *testing.T) {
	ctx := context.Background()
	cat, k, c, m := nameOnlyCarver(t)
	addr := gpuAddr["l40s"]
	if _, err := c.Carve(ctx, vgpu.GPU(addr), "site-l40s-12q", carve.Options{}); err != nil {
		t.Fatal(err)
	}
	g, err := inventory.Get(k, nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	carve.EnrichWith(nvmlstate.New("/no/such/libnvidia-ml.so.1"), cat, &g)
	if g.NVIDIATypes != nil || carve.Carries(g, cat, "site-l40s-12q") {
		t.Fatalf("a failing NVML changed the GPU: types %v", g.NVIDIATypes)
	}
	carve.EnrichWith(m, cat, &g)
	if len(g.NVIDIATypes) == 0 || !carve.Carries(g, cat, "site-l40s-12q") {
		t.Fatalf("with NVML's types (%v) the full GPU does not carry site-l40s-12q", g.NVIDIATypes)
	}
}
