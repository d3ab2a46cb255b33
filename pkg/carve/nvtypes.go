package carve

import (
	"github.com/vgpu-project/vgpu/pkg/inventory"
)

// Enrich adds to g the vGPU types NVIDIA's NVML says it supports, when the
// catalog gives one of the types of g's model by name only: once every VF
// is carved no VF lists a type any more, and the ids must come from NVML
// for the GPU to be recognised. NVML is asked once per GPU, failure
// included (no library: g stays as sysfs shows it).
func (c *Carver) Enrich(g *inventory.GPU) {
	if c.mig == nil || c.catalog == nil || g.VendorID != inventory.VendorNVIDIA || !c.namedOnly(*g) {
		return
	}
	c.typesMu.Lock()
	defer c.typesMu.Unlock()
	ts, ok := c.types[g.Address]
	if !ok {
		got, err := c.mig.VGPUTypes(g.Address)
		if err != nil {
			c.log.Warn("NVML lists no vGPU types; types the catalog gives by name only are found only while a VF lists them", "gpu", g.Address, "err", err)
		}
		for _, t := range got {
			ts = append(ts, inventory.VGPUType{ID: t.ID, Name: t.Name})
		}
		c.types[g.Address] = ts
	}
	g.NVIDIATypes = ts
}

// namedOnly reports whether a per-VF type of g's model has no id in the
// catalog.
func (c *Carver) namedOnly(g inventory.GPU) bool {
	for _, p := range c.catalog.ForGPU(g) {
		if p.Model.Dialect == inventory.DialectNVIDIAVF && p.NVIDIA.ID == 0 {
			return true
		}
	}
	return false
}
