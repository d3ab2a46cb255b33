package carve

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/mdev"
)

// CarveParent makes a virtual mdev parent (one with no PCI device behind
// it, such as the kernel's mbochs sample) carry profile name: the profile's
// split in instances of its type, with the same deterministic UUIDs a GPU's
// mdevs get. Instances of other types are removed (refused while in use,
// unless forced). No driver moves: a virtual parent has none to move.
func (c *Carver) CarveParent(ctx context.Context, parent, name string, opt Options) (Result, error) {
	return c.changeParent(ctx, parent, opt, func(p inventory.MdevParent) (Plan, error) {
		pp, err := c.catalog.ResolveParent(name, p)
		if err != nil {
			return Plan{}, err
		}
		return Plan{Parent: parent, Profile: pp.Profile, Ops: planMdevs(parent, p.Types, pp.MdevType, pp.Split, func(i int) string {
			return MdevUUID(parent, pp.MdevType, i)
		})}, nil
	})
}

// UncarveParent removes every mdev of a virtual mdev parent.
func (c *Carver) UncarveParent(ctx context.Context, parent string, opt Options) (Result, error) {
	return c.changeParent(ctx, parent, opt, func(p inventory.MdevParent) (Plan, error) {
		return Plan{Parent: parent, Ops: removeAll(parent, p.Types)}, nil
	})
}

// virtualParent finds the virtual mdev parent called name; PCI parents are
// GPUs (or VFs of one) and carved by their address.
func (c *Carver) virtualParent(name string) (inventory.MdevParent, error) {
	ps, err := inventory.VirtualMdevParents(c.fs)
	if err != nil {
		return inventory.MdevParent{}, err
	}
	var names []string
	for _, p := range ps {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return inventory.MdevParent{}, fmt.Errorf("%w %q among the virtual mdev parents (%s); a GPU is named by its PCI address",
		mdev.ErrNoParent, name, cmp.Or(strings.Join(names, ", "), "none"))
}

func (c *Carver) changeParent(ctx context.Context, parent string, opt Options, plan func(inventory.MdevParent) (Plan, error)) (Result, error) {
	if c.locks != nil && !opt.DryRun {
		unlock, err := c.locks.LockParent(ctx, parent)
		if err != nil {
			return Result{}, err
		}
		defer unlock()
	}
	p, err := c.virtualParent(parent)
	if err != nil {
		return Result{}, err
	}
	pl, err := plan(p)
	if err != nil {
		return Result{}, err
	}
	return c.execute(ctx, pl, opt)
}
