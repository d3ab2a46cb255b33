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

// GPU is the GPU at addr.
func GPU(addr pci.Address) Target { return Target{GPU: addr} }

// Parent is the virtual mdev parent called name.
func Parent(name string) Target { return Target{Parent: name} }

// IsParent reports whether t is a virtual mdev parent, not a GPU.
func (t Target) IsParent() bool { return t.Parent != "" }

// String is the parent's name or the GPU's address.
func (t Target) String() string {
	if t.IsParent() {
		return t.Parent
	}
	return t.GPU.String()
}

// Carve makes t carry profile name: a GPU (carveGPU), or a virtual parent
// with the profile's split in mdevs of its type (carveParent).
func (c *Carver) Carve(ctx context.Context, t Target, name string, opt Options) (Result, error) {
	if t.IsParent() {
		return c.carveParent(ctx, t.Parent, name, opt)
	}
	return c.carveGPU(ctx, t.GPU, name, opt)
}

// Uncarve removes every vGPU of t: a GPU's, which also gets its original
// driver back (uncarveGPU), or every mdev of a virtual parent.
func (c *Carver) Uncarve(ctx context.Context, t Target, opt Options) (Result, error) {
	if t.IsParent() {
		return c.uncarveParent(ctx, t.Parent, opt)
	}
	return c.uncarveGPU(ctx, t.GPU, opt)
}
