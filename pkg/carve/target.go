package carve

import (
	"context"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

// Target is what a carve or an uncarve changes: a GPU, by its PCI address,
// or a virtual mdev parent (one with no PCI device behind it, such as the
// kernel's mbochs sample), by name. Exactly one of the two is set.
type Target struct {
	GPU    pci.Address
	Parent string
}

// GPUTarget is the GPU at addr.
func GPUTarget(addr pci.Address) Target { return Target{GPU: addr} }

// ParentTarget is the virtual mdev parent called name.
func ParentTarget(name string) Target { return Target{Parent: name} }

// IsParent reports whether t is a virtual mdev parent, not a GPU.
func (t Target) IsParent() bool { return t.Parent != "" }

// String is the parent's name or the GPU's address.
func (t Target) String() string {
	if t.IsParent() {
		return t.Parent
	}
	return t.GPU.String()
}

// CarveTarget makes t carry profile name: Carve for a GPU; for a virtual
// parent, the profile's split in mdevs of its type (carveParent).
func (c *Carver) CarveTarget(ctx context.Context, t Target, name string, opt Options) (Result, error) {
	if t.IsParent() {
		return c.carveParent(ctx, t.Parent, name, opt)
	}
	return c.Carve(ctx, t.GPU, name, opt)
}

// UncarveTarget removes every vGPU of t: Uncarve for a GPU, every mdev of
// a virtual parent.
func (c *Carver) UncarveTarget(ctx context.Context, t Target, opt Options) (Result, error) {
	if t.IsParent() {
		return c.uncarveParent(ctx, t.Parent, opt)
	}
	return c.Uncarve(ctx, t.GPU, opt)
}
