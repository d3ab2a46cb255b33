package carve

import (
	"time"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/mig"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

// typesRetry is how long a failed NVML listing stands before it is asked
// again: a library installed after vgpud started is then found.
const typesRetry = time.Minute

// nvAnswer is one GPU's answer from NVML to one question, or when asking
// failed, and the device id of the GPU it was asked for (another GPU at
// the address is asked again).
type nvAnswer[T any] struct {
	device uint16
	v      T
	failed time.Time
}

// askOnce returns cache's answer for g, asking NVML (when ask is set) if
// there is none or the last failure is older than typesRetry; ok is false
// while there is none.
func askOnce[T any](c *Carver, cache map[pci.Address]nvAnswer[T], g inventory.GPU, ask bool, question func() (T, error), failure string) (T, bool) {
	c.typesMu.Lock()
	defer c.typesMu.Unlock()
	a, ok := cache[g.Address]
	ok = ok && a.device == g.DeviceID
	if ask && (!ok || !a.failed.IsZero() && time.Since(a.failed) > typesRetry) {
		v, err := question()
		a, ok = nvAnswer[T]{device: g.DeviceID, v: v}, true
		if err != nil {
			c.log.Warn(failure, "gpu", g.Address, "err", err)
			a.failed = time.Now()
		}
		cache[g.Address] = a
	}
	return a.v, ok
}

// Enrich adds to g what NVIDIA's NVML says and sysfs does not, for GPUs
// where it matters:
//   - the vGPU types the GPU supports, when the catalog gives one of the
//     types of g's model by name only: once every VF is carved no VF lists
//     a type any more, and the ids must come from NVML for the GPU to be
//     recognised;
//   - for a MIG-capable GPU (the catalog has MIG-backed profiles of its
//     model), its memory total and GPU instance profiles (sizes below
//     what the names say).
//
// NVML is asked once per GPU (the answers hold while the driver is
// loaded); a failure is asked again after typesRetry, and meanwhile g
// stays as sysfs shows it.
func (c *Carver) Enrich(g *inventory.GPU) { c.enrich(g, true) }

// EnrichKnown is Enrich from what NVML answered before, never asking it:
// for vgpud's listings, which answer from what vgpud knows (its reconciles
// and carves call Enrich) and must not wait for NVML's helper to start.
func (c *Carver) EnrichKnown(g *inventory.GPU) { c.enrich(g, false) }

func (c *Carver) enrich(g *inventory.GPU, ask bool) {
	if c.mig == nil || c.catalog == nil {
		return
	}
	if namedOnly(c.catalog, *g) {
		if ts, ok := askOnce(c, c.types, *g, ask, func() ([]inventory.VGPUType, error) { return listTypes(c.mig, *g) },
			"NVML lists no vGPU types; types the catalog gives by name only are found only while a VF lists them"); ok {
			g.NVIDIATypes = ts
		}
	}
	if MIGCapable(c.catalog, *g) {
		// A failed ask leaves zero sizes, which change nothing.
		if sz, ok := askOnce(c, c.sizes, *g, ask, func() (mig.Sizes, error) { return c.mig.Sizes(g.Address) },
			"NVML states no memory sizes; the catalog's are shown"); ok {
			applySizes(g, sz)
		}
	}
}

// EnrichWith is Enrich's types for a one-off look (vgpuctl gpus, vgpus): m
// is asked every time, and a failure leaves g as sysfs shows it.
func EnrichWith(m mig.Manager, catalog *profile.Catalog, g *inventory.GPU) {
	if m == nil || catalog == nil || !namedOnly(catalog, *g) {
		return
	}
	if ts, err := listTypes(m, *g); err == nil {
		g.NVIDIATypes = ts
	}
}

// SizesWith is Enrich's sizes for a one-off look (vgpuctl gpus, profiles
// --gpu): only of a MIG-capable GPU, so a host without NVIDIA GPUs never
// starts vgpu-nvml; a failure leaves g as sysfs shows it.
func SizesWith(m mig.Manager, catalog *profile.Catalog, g *inventory.GPU) {
	if m == nil || catalog == nil || !MIGCapable(catalog, *g) {
		return
	}
	if sz, err := m.Sizes(g.Address); err == nil {
		applySizes(g, sz)
	}
}

// MIGCapable reports whether g is an NVIDIA GPU of a model the catalog has
// MIG-backed profiles of.
func MIGCapable(catalog *profile.Catalog, g inventory.GPU) bool {
	if g.VendorID != inventory.VendorNVIDIA {
		return false
	}
	for _, p := range catalog.ForGPU(g) {
		if p.GPUInstance != nil {
			return true
		}
	}
	return false
}

// applySizes makes NVML's figures g's: its framebuffer, its instances'.
func applySizes(g *inventory.GPU, sz mig.Sizes) {
	if sz.TotalMB > 0 {
		g.FramebufferMB = sz.TotalMB
	}
	g.MIGProfiles = nil
	for _, p := range sz.Profiles {
		g.MIGProfiles = append(g.MIGProfiles, inventory.MIGProfile{ID: p.ID, MemoryMB: p.MemoryMB, Slices: p.Slices, Count: p.Count})
	}
}

func listTypes(m mig.Manager, g inventory.GPU) ([]inventory.VGPUType, error) {
	got, err := m.VGPUTypes(g.Address)
	var ts []inventory.VGPUType
	for _, t := range got {
		ts = append(ts, inventory.VGPUType{ID: t.ID, Name: t.Name})
	}
	return ts, err
}

// namedOnly reports whether g is NVIDIA's and a per-VF type of its model
// has no id in the catalog.
func namedOnly(catalog *profile.Catalog, g inventory.GPU) bool {
	if g.VendorID != inventory.VendorNVIDIA {
		return false
	}
	for _, p := range catalog.ForGPU(g) {
		if p.Model.Dialect == inventory.DialectNVIDIAVF && p.NVIDIA.ID == 0 {
			return true
		}
	}
	return false
}
