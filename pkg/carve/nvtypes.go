package carve

import (
	"slices"
	"time"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
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

// Enrich adds to g the dialects of its catalog profiles that the host
// stands in the way of (Unavailable), and what NVIDIA's NVML says and
// sysfs does not, for GPUs where it matters:
//   - the vGPU types the GPU supports, when the catalog gives one of the
//     types of g's model by name only and the vGPU host driver runs (no
//     other has vGPU types): once every VF is carved no VF lists a type
//     any more, and the ids must come from NVML for the GPU to be
//     recognised;
//   - for a MIG-capable GPU (the catalog has MIG-backed profiles of its
//     model) whose nvidia module is loaded, under either driver, its
//     memory total and GPU instance profiles (sizes below what the names
//     say).
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
	if c.catalog != nil {
		CatalogUnavailable(c.catalog, g)
	}
	if c.mig == nil || c.catalog == nil {
		return
	}
	if namedOnly(c.catalog, *g) {
		if ts, ok := askOnce(c, c.types, *g, ask, func() ([]inventory.VGPUType, error) { return listTypes(c.mig, *g) },
			"NVML lists no vGPU types; types the catalog gives by name only are found only while a VF lists them"); ok {
			g.NVIDIATypes = ts
		}
	}
	if SizesMatter(c.catalog, *g) {
		// A failed ask leaves zero sizes, which change nothing.
		if sz, ok := askOnce(c, c.sizes, *g, ask, func() (nvstate.Sizes, error) { return c.mig.Sizes(g.Address) },
			"NVML states no memory sizes; the catalog's are shown"); ok {
			applySizes(g, sz)
		}
	}
}

// EnrichWith is Enrich's types for a one-off look (vgpuctl gpus, vgpus): m
// is asked every time, and a failure leaves g as sysfs shows it.
func EnrichWith(m nvstate.Manager, catalog *profile.Catalog, g *inventory.GPU) {
	if catalog == nil {
		return
	}
	CatalogUnavailable(catalog, g)
	if m == nil || !namedOnly(catalog, *g) {
		return
	}
	if ts, err := listTypes(m, *g); err == nil {
		g.NVIDIATypes = ts
	}
}

// SizesWith is Enrich's sizes for a one-off look (vgpuctl gpus -o json,
// profiles --gpu): only where they matter (SizesMatter), so a host
// without NVIDIA GPUs never starts vgpu-nvml; a failure leaves g as sysfs
// shows it.
func SizesWith(m nvstate.Manager, catalog *profile.Catalog, g *inventory.GPU) {
	if m == nil || catalog == nil || !SizesMatter(catalog, *g) {
		return
	}
	if sz, err := m.Sizes(g.Address); err == nil {
		applySizes(g, sz)
	}
}

// SizesMatter reports whether NVML's sizes of g say what sysfs and the
// catalog do not: g is MIG-capable and its nvidia module, which NVML
// answers through, is loaded. The datacenter driver states them too (a
// real H200 guest did, MIG off), so the vGPU host driver is not asked for.
func SizesMatter(catalog *profile.Catalog, g inventory.GPU) bool {
	return g.NVIDIADriver != nil && MIGCapable(catalog, g)
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
func applySizes(g *inventory.GPU, sz nvstate.Sizes) {
	if sz.TotalMB > 0 {
		g.FramebufferMB = sz.TotalMB
	}
	g.MIGProfiles = nil
	for _, p := range sz.Profiles {
		g.MIGProfiles = append(g.MIGProfiles, inventory.MIGProfile{ID: p.ID, MemoryMB: p.MemoryMB, Slices: p.Slices, Count: p.Count})
	}
}

// GuestWith, for a listing that says why (vgpuctl gpus, profiles --gpu),
// asks NVML's virtualization mode whether this OS is a guest where sysfs
// cannot tell why an NVIDIA SR-IOV board shows no SR-IOV capability (after
// EnrichWith), and words g's reasons anew when it is.
func GuestWith(m nvstate.Manager, g *inventory.GPU) {
	if m == nil || !askGuest(*g) {
		return
	}
	if v, err := m.Virtualization(g.Address); err == nil && v.Guest() {
		g.SetGuest("NVML says the GPU is passed through to this VM: virtualization mode " + v.Mode)
	}
}

// askGuest: g is an NVIDIA GPU whose vGPU dialects want an SR-IOV
// capability it does not show, on a host whose PCI topology does not say
// it is a guest, and the nvidia module (NVML's driver) is loaded.
func askGuest(g inventory.GPU) bool {
	if g.VendorID != inventory.VendorNVIDIA || g.SRIOV != nil || g.Guest != "" || g.NVIDIADriver == nil {
		return false
	}
	for _, u := range g.Unavailable {
		if u.Dialect == inventory.DialectNVIDIAVF || u.Dialect == inventory.DialectSRIOVMdev {
			return true
		}
	}
	return false
}

// CatalogUnavailable adds to g.Unavailable the dialects of g's catalog
// profiles that g neither speaks nor lists as unavailable, where the host
// stands in their way (inventory.WhyNot): an S7150 whose firmware hides
// SR-IOV, a model the inventory's tables do not know.
func CatalogUnavailable(catalog *profile.Catalog, g *inventory.GPU) {
	for _, p := range catalog.ForGPU(*g) {
		d := p.Model.Dialect
		if slices.Contains(g.Dialects, d) || slices.ContainsFunc(g.Unavailable, func(u inventory.Unavailable) bool { return u.Dialect == d }) {
			continue
		}
		if why := inventory.WhyNot(*g, d); why != "" {
			g.Unavailable = append(g.Unavailable, inventory.Unavailable{Dialect: d, Reason: why})
		}
	}
}

func listTypes(m nvstate.Manager, g inventory.GPU) ([]inventory.VGPUType, error) {
	got, err := m.VGPUTypes(g.Address)
	var ts []inventory.VGPUType
	for _, t := range got {
		ts = append(ts, inventory.VGPUType{ID: t.ID, Name: t.Name})
	}
	return ts, err
}

// namedOnly reports whether g is NVIDIA's, under the vGPU host driver
// (NVML lists no vGPU type under another), and a per-VF type of its model
// has no id in the catalog.
func namedOnly(catalog *profile.Catalog, g inventory.GPU) bool {
	if g.VendorID != inventory.VendorNVIDIA || g.NVIDIADriver == nil || !g.NVIDIADriver.VGPUHost {
		return false
	}
	for _, p := range catalog.ForGPU(g) {
		if p.Model.Dialect == inventory.DialectNVIDIAVF && p.NVIDIA.ID == 0 {
			return true
		}
	}
	return false
}
