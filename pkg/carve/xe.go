package carve

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/xe"
)

// planXe writes the profile's Intel xe scheduling into its VFs. xe resets a
// VF's profile when the VFs go, so VFs a plan enables anew get every value
// that is not xe's default; VFs that stay get what differs. The VFs share
// one priority, which changes only for every function at once (the bulk
// file) and outlives the VFs.
//
// fresh: the plan re-creates the VFs.
func planXe(g inventory.GPU, p profile.Plan, fresh bool) ([]Op, error) {
	if g.Driver != xe.Driver {
		if p.Xe != nil && g.SRIOV != nil {
			return nil, fmt.Errorf("plan %s on %s: the profile sets Intel xe's VF scheduling, and xe does not drive this GPU (%s)", p.Profile, g.Address, driverState(g.Driver))
		}
		return nil, nil
	}
	if g.SRIOV != nil && g.Xe == nil {
		if p.Xe != nil {
			return nil, fmt.Errorf("plan %s on %s: the profile sets Intel xe's VF scheduling, and this kernel has no %s (Linux 6.19 or later has it); use a profile without xe scheduling",
				p.Profile, g.Address, xe.AdminDir(g.Address))
		}
		return nil, nil
	}
	want := xe.Sched{Priority: p.Xe.XePriority()}
	if p.Xe != nil {
		want.ExecQuantumMS, want.PreemptTimeoutUS = p.Xe.ExecQuantumMS, p.Xe.PreemptTimeoutUS
	}
	deflt := xe.Sched{Priority: xeDefaultPriority()}
	kept := !fresh && g.SRIOV != nil && g.Xe != nil && g.SRIOV.NumVFs == p.NumVFs && len(g.Xe.VFs) == p.NumVFs
	var ops []Op
	priority := want.Priority != deflt.Priority
	if g.Xe != nil {
		priority = g.Xe.Priority != want.Priority
	}
	for i := range p.NumVFs {
		cur := deflt
		if kept {
			cur = g.Xe.VFs[i]
		}
		ops = append(ops, xeVFOps(g.Address, i, cur, want)...)
	}
	if priority {
		ops = append(ops, Op{Kind: OpXeSched, Device: g.Address, Attr: xe.Priority, Value: want.Priority, Bulk: true})
	}
	return ops, nil
}

// planXeQuota returns the writes of each VF's pinned VRAM (vram_quota),
// for the plan to make before it enables the VFs: xe auto-provisions VRAM
// at enabling unless a VF has some, and releases it all when the VFs go
// (docs/vendors/intel.md). None when p pins none or the VFs have it already.
func planXeQuota(g inventory.GPU, p profile.Plan) ([]Op, error) {
	if p.XeVRAMQuota == 0 {
		return nil, nil
	}
	switch {
	case g.Driver != xe.Driver:
		return nil, fmt.Errorf("plan %s on %s: the profile pins Intel xe's VF VRAM, and xe does not drive this GPU (%s)", p.Profile, g.Address, driverState(g.Driver))
	case g.Xe == nil || !g.Xe.Quota:
		return nil, fmt.Errorf("plan %s on %s: the profile pins each VF's VRAM, and this kernel has no %s (Linux 7.0 or later has it); use a profile without vram-quota",
			p.Profile, g.Address, xe.VFFile(g.Address, 1, xe.VRAMQuota))
	}
	want := strconv.FormatUint(p.XeVRAMQuota, 10)
	if g.SRIOV.NumVFs == p.NumVFs && len(g.Xe.Quotas) == p.NumVFs &&
		!slices.ContainsFunc(g.Xe.Quotas, func(q uint64) bool { return q != p.XeVRAMQuota }) {
		return nil, nil
	}
	ops := make([]Op, p.NumVFs)
	for i := range ops {
		ops[i] = Op{Kind: OpXeSched, Device: g.Address, VF: vfIndex(i), Attr: xe.VRAMQuota, Value: want}
	}
	return ops, nil
}

// xeDefaultPriority is the VFs' priority when xe loads.
func xeDefaultPriority() string { return (*profile.XeOptions)(nil).XePriority() }

// xeFile is the attribute an OpXeSched writes.
func xeFile(o Op) string {
	switch {
	case o.Bulk:
		return xe.BulkFile(o.Device, o.Attr)
	case o.VF == nil:
		return xe.PFFile(o.Device, o.Attr)
	}
	return xe.VFFile(o.Device, *o.VF+1, o.Attr) // xe numbers VFs from 1
}

// xeSched performs an OpXeSched; a value already in place is not written.
func (c *Carver) xeSched(o Op) error {
	if !o.Bulk {
		if cur, err := xe.Read(c.fs, o.Device, xeFile(o)); err == nil && cur == o.Value {
			return nil
		}
	}
	err := xe.Write(c.fs, o.Device, xeFile(o), o.Value)
	if errors.Is(err, xe.ErrNoAdmin) {
		return fmt.Errorf("%w: Intel xe's VF scheduling needs Linux 6.19 or later", err)
	}
	return err
}

// xeInverse reads what an OpXeSched is about to change. A bulk priority is
// put back from VF 1's (every VF's priority moves only in bulk) and then
// the PF's own, which the bulk write changed too.
func (c *Carver) xeInverse(o Op) ([]Op, error) {
	if !o.Bulk {
		cur, err := xe.Read(c.fs, o.Device, xeFile(o))
		if err != nil {
			return nil, err
		}
		u := o
		u.Value = cur
		return []Op{u}, nil
	}
	vf, err := xe.Read(c.fs, o.Device, xe.VFFile(o.Device, 1, o.Attr))
	if err != nil {
		return nil, err
	}
	pf, err := xe.Read(c.fs, o.Device, xe.PFFile(o.Device, o.Attr))
	if err != nil {
		return nil, err
	}
	// Undos run last first: the bulk write, then the PF's own.
	return []Op{{Kind: OpXeSched, Device: o.Device, Attr: o.Attr, Value: pf},
		{Kind: OpXeSched, Device: o.Device, Attr: o.Attr, Value: vf, Bulk: true}}, nil
}

// xeKept returns what gives pf's first n VFs their current settings again
// when they are re-created: before, the writes of their VRAM (xe releases
// it when they go; kernels with vram_quota); after, of their execution
// quantum and preemption timeout. None when xe does not drive pf or the
// kernel has no sriov_admin/.
func (c *Carver) xeKept(pf pci.Address, n int) (before, after []Op, err error) {
	if n == 0 {
		return nil, nil, nil
	}
	if drv, err := pci.CurrentDriver(c.fs, pf); err != nil || drv != xe.Driver {
		return nil, nil, err
	}
	if ok, err := xe.HasAdmin(c.fs, pf); err != nil || !ok {
		return nil, nil, err
	}
	quota, err := xe.HasQuota(c.fs, pf)
	if err != nil {
		return nil, nil, err
	}
	for i := range n {
		s, err := xe.ReadVF(c.fs, pf, i+1)
		if err != nil {
			return nil, nil, err
		}
		after = append(after, xeVFOps(pf, i, xe.Sched{}, s)...) // re-created VFs have 0 (unlimited)
		if !quota {
			continue
		}
		q, err := xe.ReadQuota(c.fs, pf, i+1)
		if err != nil {
			return nil, nil, err
		}
		before = append(before, Op{Kind: OpXeSched, Device: pf, VF: vfIndex(i), Attr: xe.VRAMQuota, Value: strconv.FormatUint(q, 10)})
	}
	return before, after, nil
}

// xeVFOps are the ops that take VF i of pf from cur's execution quantum
// and preemption timeout to want's.
func xeVFOps(pf pci.Address, i int, cur, want xe.Sched) []Op {
	var ops []Op
	if cur.ExecQuantumMS != want.ExecQuantumMS {
		ops = append(ops, Op{Kind: OpXeSched, Device: pf, VF: vfIndex(i), Attr: xe.ExecQuantum, Value: strconv.FormatUint(uint64(want.ExecQuantumMS), 10)})
	}
	if cur.PreemptTimeoutUS != want.PreemptTimeoutUS {
		ops = append(ops, Op{Kind: OpXeSched, Device: pf, VF: vfIndex(i), Attr: xe.PreemptTimeout, Value: strconv.FormatUint(uint64(want.PreemptTimeoutUS), 10)})
	}
	return ops
}
