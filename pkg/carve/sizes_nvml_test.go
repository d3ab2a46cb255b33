//go:build cgo

package carve_test

import (
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// countingMIG counts the NVML calls a look makes.
type countingMIG struct {
	nvstate.Manager
	sizes, types int
}

func (c *countingMIG) Sizes(gpu pci.Address) (nvstate.Sizes, error) {
	c.sizes++
	return c.Manager.Sizes(gpu)
}

func (c *countingMIG) VGPUTypes(gpu pci.Address) ([]nvstate.VGPUType, error) {
	c.types++
	return c.Manager.VGPUTypes(gpu)
}

// A MIG-capable GPU's framebuffer is NVML's memory total, and its
// MIG-backed profiles take each instance's memory from NVML, not from the
// figure in the profile's name: an A100's 1g.5gb has 4864 MiB (the catalog
// states none, its name says 5120); an H100 without VFs, whose sysfs says
// nothing of its memory, has NVML's 81559 MiB. Enrich asks NVML once per
// GPU.
func TestSizesFromNVML(t *testing.T) {
	a100 := newMIGRigOn(t, simkernel.ModelA100VF, simnvml.ModelA100PCIe40GB)
	g, err := inventory.Get(a100.k, nil, migAddr)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := a100.cat.Resolve("a100-1-5c", g)
	if err != nil || pl.FramebufferMB != 5120 {
		t.Fatalf("a100-1-5c without NVML: %d MiB, %v; want the name's 5120", pl.FramebufferMB, err)
	}
	count := &countingMIG{Manager: a100.mgr}
	a100.useCarver(t, carve.WithMIG(count))
	known := g
	a100.c.EnrichKnown(&known)
	if count.sizes != 0 || known.MIGProfiles != nil {
		t.Fatalf("EnrichKnown before any answer: %d NVML calls, profiles %+v", count.sizes, known.MIGProfiles)
	}
	a100.c.Enrich(&g)
	a100.c.Enrich(&g)
	if count.sizes != 1 {
		t.Fatalf("Enrich asked NVML for sizes %d times, want once (they hold while the driver is loaded)", count.sizes)
	}
	a100.c.EnrichKnown(&known) // vgpud's listings: what NVML said, never asking
	if p, ok := known.MIGProfile(19); !ok || p.MemoryMB != 4864 || count.sizes != 1 {
		t.Fatalf("EnrichKnown after Enrich: profile 19 %+v (%v), %d calls", p, ok, count.sizes)
	}
	if p, ok := g.MIGProfile(19); !ok || p.MemoryMB != 4864 || p.Count != 7 {
		t.Fatalf("profile 19 after Enrich: %+v, %v", p, ok)
	}
	if pl, err = a100.cat.Resolve("a100-1-5c", g); err != nil || pl.FramebufferMB != 4864 {
		t.Fatalf("a100-1-5c with NVML: %d MiB, %v; want NVML's 4864", pl.FramebufferMB, err)
	}

	h100 := newMIGRigOn(t, simkernel.ModelH100VF, simnvml.ModelH100PCIe80GB)
	g, err = inventory.Get(h100.k, nil, migAddr)
	if err != nil {
		t.Fatal(err)
	}
	if g.FramebufferMB != 0 {
		t.Fatalf("H100 framebuffer from sysfs %d MiB, want none (no VF lists a type yet)", g.FramebufferMB)
	}
	carve.SizesWith(h100.mgr, h100.cat, &g)
	carve.EnrichWith(h100.mgr, h100.cat, &g) // the type ids the catalog names only
	if g.FramebufferMB != 81559 {
		t.Fatalf("H100 framebuffer with NVML %d MiB, want NVML's total 81559", g.FramebufferMB)
	}
	if pl, err := h100.cat.Resolve("h100-1-10c", g); err != nil || pl.FramebufferMB != 9984 {
		t.Fatalf("h100-1-10c: %d MiB, %v; want 9984", pl.FramebufferMB, err)
	}
}

// NVML is asked only where its answer matters: never about an AMD or Intel
// GPU (a host without NVIDIA GPUs never starts vgpu-nvml), and about an
// NVIDIA GPU without MIG-backed profiles only for its types.
func TestEnrichAsksNVMLOnlyWhereItMatters(t *testing.T) {
	r := newMIGRigOn(t, simkernel.ModelA100VF, simnvml.ModelA100PCIe40GB)
	count := &countingMIG{Manager: r.mgr}
	for _, model := range []string{"mi25", "t4", "arc-pro-b50"} {
		rig := newRig(t, model)
		g, err := inventory.Get(rig.k, nil, rig.gpu)
		if err != nil {
			t.Fatal(err)
		}
		carve.EnrichWith(count, rig.cat, &g)
		carve.SizesWith(count, rig.cat, &g)
		if model != "t4" && (count.sizes != 0 || count.types != 0) {
			t.Fatalf("%s: NVML asked (%d sizes, %d types)", model, count.sizes, count.types)
		}
		if g.MIGProfiles != nil {
			t.Fatalf("%s got MIG profiles %+v", model, g.MIGProfiles)
		}
	}
	if count.sizes != 0 {
		t.Fatalf("a T4 (no MIG) was asked for its sizes %d times", count.sizes)
	}
}

// The H200 passed through to a VM, under the datacenter driver (the real
// host's shape, with the measured H200's NVML): its vGPU dialects cannot be
// carved, but NVML states its sizes under that driver too, so Enrich asks
// them once (vgpud's reconcile: its GPU answer's framebuffer is NVML's
// total) and never its vGPU types, which that driver lacks; EnrichKnown
// answers from that. Without the nvidia module NVML has nothing to say.
func TestSizesOnTheH200Guest(t *testing.T) {
	host, err := simkernel.ExampleHost("h200-guest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	addr := host.GPUs[0].Address
	r := newRigOn(t, host, addr)
	nv, err := simnvml.ForHost(r.k, host)
	if err != nil || nv == nil {
		t.Fatalf("the H200 guest's NVML: %v, %v", nv, err)
	}
	count := &countingMIG{Manager: nvmlstate.NewWith(nv, "simnvml")}
	c := carve.New(r.rec, r.cat, r.store, carve.WithMIG(count))
	g := r.gpuNow(t)
	if g.FramebufferMB != 0 || len(g.Dialects) != 0 {
		t.Fatalf("the H200 guest from sysfs: %d MiB, dialects %v; want neither", g.FramebufferMB, g.Dialects)
	}
	if !carve.SizesMatter(r.cat, g) {
		t.Fatal("the H200's sizes do not matter under the datacenter driver")
	}
	noModule := g
	noModule.NVIDIADriver = nil
	if carve.SizesMatter(r.cat, noModule) {
		t.Error("sizes asked of a GPU without the nvidia module")
	}
	known := g
	c.Enrich(&g)
	c.Enrich(&g)
	c.EnrichKnown(&known)
	if count.sizes != 1 || count.types != 0 {
		t.Fatalf("NVML asked %d times for sizes, %d for types; want once, never", count.sizes, count.types)
	}
	for _, x := range []inventory.GPU{g, known} {
		if p, ok := x.MIGProfile(19); x.FramebufferMB != 143771 || !ok || p.MemoryMB != 16384 {
			t.Errorf("after Enrich: %d MiB, 1g.18gb %+v (%v); want 143771 and 16384", x.FramebufferMB, p, ok)
		}
	}
	if _, err := r.cat.Resolve("h200x-1-18c", g); err == nil || !strings.Contains(err.Error(), "not the vGPU host driver") {
		t.Errorf("h200x-1-18c on the guest: %v; want a refusal naming the driver", err)
	}
}
