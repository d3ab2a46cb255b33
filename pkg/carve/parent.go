package carve

import (
	"cmp"
	"context"
	"fmt"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// carveParent makes a virtual mdev parent (one with no PCI device behind
// it, such as the kernel's mbochs sample) carry profile name: the profile's
// split in instances of its type, with the same deterministic UUIDs a GPU's
// mdevs get. Instances of other types are removed (refused while in use,
// unless forced). No driver moves: a virtual parent has none to move.
func (c *Carver) carveParent(ctx context.Context, parent, name string, opt Options) (Result, error) {
	return c.changeParent(ctx, parent, opt, func(p inventory.MdevParent) (Plan, error) {
		pp, err := c.catalog.ResolveParent(name, p)
		if err != nil {
			return Plan{}, err
		}
		pins, err := c.checkPins(pp, opt.MdevUUIDs, mdevsOn(parent, p.Types, nil))
		if err != nil {
			return Plan{}, err
		}
		return Plan{Parent: parent, Profile: pp.Profile, Ops: planMdevs(parent, p.Types, pp.MdevType, pp.Split, pins, func(i int) string {
			return MdevUUID(parent, pp.MdevType, i)
		})}, nil
	})
}

// uncarveParent removes every mdev of a virtual mdev parent.
func (c *Carver) uncarveParent(ctx context.Context, parent string, opt Options) (Result, error) {
	return c.changeParent(ctx, parent, opt, func(p inventory.MdevParent) (Plan, error) {
		return Plan{Parent: parent, Ops: removeAll(parent, p.Types)}, nil
	})
}

func (c *Carver) changeParent(ctx context.Context, parent string, opt Options, plan func(inventory.MdevParent) (Plan, error)) (Result, error) {
	if c.locks != nil && !opt.DryRun {
		unlock, err := c.locks.Lock(ctx, vgpu.Parent(parent))
		if err != nil {
			return Result{}, err
		}
		defer unlock()
	}
	p, err := inventory.VirtualMdevParent(c.fs, parent)
	if err != nil {
		return Result{}, err
	}
	pl, err := plan(p)
	if err != nil {
		return Result{}, err
	}
	return c.execute(ctx, pl, opt)
}

// checkPins vets the mdev UUIDs pinned for a carve of plan p: p makes
// mdevs, at most its split, and none of them exists on a parent outside
// own (the parents of the GPU or the virtual parent carved, by name): the
// kernel cannot move an mdev, and vgpu removes none it did not plan for.
// It returns them in the kernel's form.
func (c *Carver) checkPins(p profile.Plan, pins []string, own map[string]string) ([]string, error) {
	if len(pins) == 0 {
		return nil, nil
	}
	target := cmp.Or(p.Parent, p.GPU.String())
	if p.Dialect != inventory.DialectMdev && p.Dialect != inventory.DialectSRIOVMdev {
		return nil, fmt.Errorf("carve %s on %s: %d mdev UUIDs pinned, and the profile makes no mdevs (dialect %s)", p.Profile, target, len(pins), p.Dialect)
	}
	if len(pins) > p.Split {
		return nil, fmt.Errorf("carve %s on %s: %d mdev UUIDs pinned, more than the profile's split (%d)", p.Profile, target, len(pins), p.Split)
	}
	out := make([]string, len(pins))
	for i, u := range pins {
		v, err := mdev.ValidateUUID(u)
		if err != nil {
			return nil, fmt.Errorf("carve %s on %s: pinned mdev UUID: %w", p.Profile, target, err)
		}
		out[i] = v
		if _, ok := own[v]; ok {
			continue
		}
		in, ok, err := mdev.Get(c.fs, v)
		if err != nil {
			return nil, fmt.Errorf("carve %s on %s: look up pinned mdev %s: %w", p.Profile, target, v, err)
		}
		if ok {
			return nil, fmt.Errorf("carve %s on %s: %w: mdev %s, pinned for %s, exists on %s (type %s); remove it there (mdevctl stop, or vgpuctl uncarve of its GPU) once no VM uses it, or pin another UUID",
				p.Profile, target, ErrPinnedElsewhere, v, target, in.Parent, in.Type)
		}
	}
	return out, nil
}

// gpuMdevs maps the mdevs on g and its VFs to their parents.
func gpuMdevs(g inventory.GPU) map[string]string {
	out := mdevsOn(g.Address.String(), g.MdevTypes, nil)
	if g.SRIOV != nil {
		for _, vf := range g.SRIOV.VFs {
			mdevsOn(vf.Address.String(), vf.MdevTypes, out)
		}
	}
	return out
}

// mdevsOn adds the mdevs of types on parent to m (a new map when nil).
func mdevsOn(parent string, types []inventory.MdevType, m map[string]string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	for _, t := range types {
		for _, u := range t.Instances {
			m[u] = parent
		}
	}
	return m
}
