package carve

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

// NVIDIA's mixed-size mode (nvidia-smi vgpu -shm; NVML's vGPU heterogeneous
// mode, docs/vendors/nvidia.md): sriov-manage's rebind of the PF clears it, and the
// driver takes it only while no vGPU exists on the GPU. So it is set after
// sriov-manage -e and before the first type, and put back after every
// sriov-manage vgpu runs on a GPU that had it.

// withMixedSize makes pl, the plan of a profile that asks for mixed-size
// mode, also set it: after the plan's sriov-manage -e (which clears it),
// else before its first type when no vGPU is left by then, else every
// vGPU goes first (in use: refused unless forced) and the profile's are
// made again on the bare GPU, as for the scheduler.
func (c *Carver) withMixedSize(g inventory.GPU, p profile.Plan, original string, pl Plan) (Plan, error) {
	if err := c.needNVML(g.Address); err != nil {
		return pl, fmt.Errorf("carve %s on %s: mixed-size mode is set by NVML: %w", p.Profile, g.Address, err)
	}
	// NVML sees only a GPU on nvidia; one elsewhere lost the mode with
	// the driver, and its plan has the sriov-manage -e to set it after.
	on := false
	if g.Driver == profile.DriverNVIDIA {
		var err error
		if on, err = c.mig.MixedSize(g.Address); err != nil {
			return pl, fmt.Errorf("carve %s on %s: the profile asks for mixed-size mode: %w", p.Profile, g.Address, err)
		}
	}
	set := Op{Kind: OpNVMixedSize, Device: g.Address, Count: 1}
	if i := slices.IndexFunc(pl.Ops, func(o Op) bool { return o.Kind == OpSriovManage && o.Count == 1 }); i >= 0 {
		pl.Ops = slices.Insert(pl.Ops, i+1, set)
		return pl, nil
	}
	if on {
		return pl, nil
	}
	first := slices.IndexFunc(pl.Ops, func(o Op) bool { return o.Kind == OpNVType && o.Count != 0 })
	if first < 0 {
		first = len(pl.Ops)
	}
	if leftBefore(g, pl.Ops[:first]) {
		rest, err := PlanCarve(bare(g), p, original)
		if err != nil {
			return pl, err
		}
		pl.Ops = append(append(removeVGPUs(g), set), rest.Ops...)
		return pl, nil
	}
	pl.Ops = slices.Insert(pl.Ops, first, set)
	return pl, nil
}

// leftBefore reports whether a VF of g still has its type after ops.
func leftBefore(g inventory.GPU, ops []Op) bool {
	if g.SRIOV == nil {
		return false
	}
	for _, vf := range g.SRIOV.VFs {
		if vf.NVIDIA == nil || vf.NVIDIA.CurrentType == 0 {
			continue
		}
		cleared := slices.ContainsFunc(ops, func(o Op) bool {
			if o.Kind != OpNVType || o.Count != 0 {
				return false
			}
			if o.VF != nil {
				return o.Device == g.Address && *o.VF == vf.Index
			}
			return o.Device == vf.Address
		})
		if !cleared {
			return true
		}
	}
	return false
}

// keepMixedSize puts a GPU's mixed-size mode back after each sriov-manage
// of pl that the mode is not already set after: the script's rebind
// clears it, and an admin's setting must not be lost to a carve. Without
// NVML, or with MIG on (no such mode), there is nothing to read or keep;
// a failed read is logged, and the carve goes on.
func (c *Carver) keepMixedSize(g inventory.GPU, pl Plan) Plan {
	// A PF off nvidia lost the mode when it left, and NVML cannot see it;
	// a plan that turns MIG on leaves no such mode to keep (nvml.h).
	if c.mig == nil || !bySriovManage(g) || g.Driver != profile.DriverNVIDIA ||
		!slices.ContainsFunc(pl.Ops, func(o Op) bool { return o.Kind == OpSriovManage }) ||
		slices.ContainsFunc(pl.Ops, func(o Op) bool { return o.Kind == OpMIGMode && o.Count == 1 }) {
		return pl
	}
	on, err := c.mig.MixedSize(g.Address)
	switch {
	case errors.Is(err, nvstate.ErrUnavailable) || errors.Is(err, nvstate.ErrNotSupported):
		return pl
	case err != nil:
		// The mode is an admin's extra, not the profile's: the carve goes
		// on, and the log says what may be lost.
		c.log.Warn("cannot read the GPU's mixed-size mode, which sriov-manage clears; it is not put back", "gpu", g.Address, "err", err)
		return pl
	case !on:
		return pl
	}
	var ops []Op
	for i, o := range pl.Ops {
		ops = append(ops, o)
		if o.Kind == OpSriovManage && (i+1 == len(pl.Ops) || pl.Ops[i+1].Kind != OpNVMixedSize) {
			ops = append(ops, Op{Kind: OpNVMixedSize, Device: g.Address, Count: 1})
		}
	}
	pl.Ops = ops
	return pl
}

// mixedSizeOn reports, for the undo of a sriov-manage, whether the GPU is
// in mixed-size mode now. As in keepMixedSize, no NVML or no such mode is
// "off", and a failed read is logged.
func (c *Carver) mixedSizeOn(o Op) bool {
	if c.mig == nil {
		return false
	}
	on, err := c.mig.MixedSize(o.Device)
	if err != nil && !errors.Is(err, nvstate.ErrUnavailable) && !errors.Is(err, nvstate.ErrNotSupported) {
		c.log.Warn("cannot read the GPU's mixed-size mode, which sriov-manage clears; an undo does not put it back", "gpu", o.Device, "err", err)
	}
	return err == nil && on
}

// mixedSizeInverse reads the mode an OpNVMixedSize is about to change.
func (c *Carver) mixedSizeInverse(o Op) ([]Op, error) {
	if err := c.needNVML(o.Device); err != nil {
		return nil, err
	}
	on, err := c.mig.MixedSize(o.Device)
	if err != nil {
		return nil, err
	}
	return []Op{{Kind: OpNVMixedSize, Device: o.Device, Count: boolCount(on)}}, nil
}

// mixedSizeExec performs an OpNVMixedSize; a mode already so is not set.
func (c *Carver) mixedSizeExec(o Op) error {
	if err := c.needNVML(o.Device); err != nil {
		return err
	}
	on := o.Count != 0
	if cur, err := c.mig.MixedSize(o.Device); err == nil && cur == on {
		return nil
	}
	return c.mig.SetMixedSize(o.Device, on)
}
