package carve

import (
	"context"

	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Carve makes t carry profile name: a GPU (carveGPU), or a virtual parent
// with the profile's split in mdevs of its type (carveParent).
func (c *Carver) Carve(ctx context.Context, t vgpu.Target, name string, opt Options) (Result, error) {
	if t.IsParent() {
		return c.carveParent(ctx, t.Parent, name, opt)
	}
	return c.carveGPU(ctx, t.GPU, name, opt)
}

// Uncarve removes every vGPU of t: a GPU's, which also gets its original
// driver back (uncarveGPU), or every mdev of a virtual parent.
func (c *Carver) Uncarve(ctx context.Context, t vgpu.Target, opt Options) (Result, error) {
	if t.IsParent() {
		return c.uncarveParent(ctx, t.Parent, opt)
	}
	return c.uncarveGPU(ctx, t.GPU, opt)
}
