package carve

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

// MIGState is what NVML says of a GPU: its MIG mode and GPU instances.
type MIGState struct {
	Mode      nvstate.Mode       `json:"mode"`
	Instances []nvstate.Instance `json:"instances"`
}

// WithMIG gives the carver NVML for MIG-backed profiles, the vGPU
// scheduler and mixed-size mode. Without it those are refused, and an
// admin's mixed-size mode is not kept over sriov-manage; every other
// profile works alike.
func WithMIG(m nvstate.Manager) Option { return func(c *Carver) { c.mig = m } }

// PlanCarveMIG is PlanCarve for a MIG-backed profile on a GPU in state st.
// The driver's order (docs/vendors/nvidia.md, "MIG-backed vGPU"): MIG mode on while the VFs are off
// (with VFs it only pends), sriov-manage -e (its rebind wipes every GPU
// instance), the instances, then the type on each VF. Types go before the
// instances they run on, and instances before a sriov-manage that would
// wipe them, so that undo can put each back.
func PlanCarveMIG(g inventory.GPU, p profile.Plan, original string, st MIGState) (Plan, error) {
	if p.GPUInstance == nil || p.Dialect != inventory.DialectNVIDIAVF {
		return PlanCarve(g, p, original)
	}
	return planCarve(g, p, original, &st)
}

// planMIG is the nvidia-vf dialect's ops for a MIG-backed plan.
func planMIG(g inventory.GPU, p profile.Plan, st MIGState) []Op {
	gi := p.GPUInstance
	vfsOn := g.SRIOV != nil && g.SRIOV.NumVFs > 0
	// MIG mode cannot change while VFs exist: they go and come back.
	cycle := vfsOn && !st.Mode.Current
	matching := 0
	for _, in := range st.Instances {
		if in.ProfileID == gi.ID {
			matching++
		}
	}
	// More instances of the profile than vGPUs wanted: which carry a vGPU
	// is the driver's secret, so all are rebuilt.
	rebuild := matching > p.Split
	keep := vfsOn && !cycle

	// Types that stay; the rest are cleared, and the first Split VFs
	// without the type get it last.
	kept := map[int]bool{}
	var ops, sets []Op
	if vfsOn {
		for _, vf := range g.SRIOV.VFs {
			cur := 0
			if vf.NVIDIA != nil {
				cur = vf.NVIDIA.CurrentType
			}
			want := 0
			if vf.Index < p.Split {
				want = p.NVIDIATypeID
			}
			if keep && !rebuild && cur == want {
				kept[vf.Index] = true
				continue
			}
			if cur != 0 {
				ops = append(ops, Op{Kind: OpNVType, Device: g.Address, VF: vfIndex(vf.Index), Count: 0, Destroys: vf.Address.String()})
			}
		}
	}
	// Instances: those of other profiles go, and all of them before a
	// sriov-manage -e, which would wipe them beyond undo's reach.
	enable := !vfsOn || cycle
	have := 0
	for _, in := range st.Instances {
		if in.ProfileID == gi.ID && !rebuild && !enable {
			have++
			continue
		}
		ops = append(ops, Op{Kind: OpGIDestroy, Device: g.Address, Instance: &in})
	}
	if cycle {
		ops = append(ops, Op{Kind: OpSriovManage, Device: g.Address, Count: 0, Destroys: "the VFs of " + g.Address.String()})
	}
	if !st.Mode.Current {
		ops = append(ops, Op{Kind: OpMIGMode, Device: g.Address, Count: 1})
	}
	if enable {
		ops = append(ops, Op{Kind: OpSriovManage, Device: g.Address, Count: 1})
	}
	for range p.Split - have {
		ops = append(ops, Op{Kind: OpGICreate, Device: g.Address, Count: gi.ID, Type: gi.Profile})
	}
	for i := range p.Split {
		ops = append(ops, Op{Kind: OpDriver, Device: g.Address, VF: vfIndex(i), To: p.VFDriver})
	}
	for i := range p.Split {
		if !kept[i] {
			sets = append(sets, Op{Kind: OpNVType, Device: g.Address, VF: vfIndex(i), Count: p.NVIDIATypeID})
		}
	}
	return append(ops, sets...)
}

// migTeardown inserts, before the op that disables g's VFs, the
// destruction of every GPU instance: uncarve leaves none behind (MIG mode
// stays on: turning it off gains nothing and fails while VFs exist).
func migTeardown(pl Plan, st MIGState) Plan {
	var destroys []Op
	for _, in := range st.Instances {
		destroys = append(destroys, Op{Kind: OpGIDestroy, Device: pl.GPU, Instance: &in})
	}
	i := slices.IndexFunc(pl.Ops, func(o Op) bool { return o.Kind == OpSriovManage && o.Count == 0 })
	if i < 0 {
		i = len(pl.Ops)
	}
	pl.Ops = slices.Insert(pl.Ops, i, destroys...)
	return pl
}

// needNVML says, naming gpu, that a carver without NVML cannot do what
// needs it (MIG, the vGPU scheduler).
func (c *Carver) needNVML(gpu pci.Address) error {
	if c.mig == nil {
		return fmt.Errorf("GPU %s: %w: this carver was started without NVML", gpu, nvstate.ErrUnavailable)
	}
	return nil
}

// migState reads g's MIG state for a plan; an error names the GPU.
func (c *Carver) migState(addr pci.Address) (MIGState, error) {
	if err := c.needNVML(addr); err != nil {
		return MIGState{}, err
	}
	mode, err := c.mig.Mode(addr)
	if err != nil {
		return MIGState{}, err
	}
	st := MIGState{Mode: mode}
	if mode.Current {
		if st.Instances, err = c.mig.Instances(addr); err != nil {
			return MIGState{}, err
		}
	}
	return st, nil
}

// migModel reports whether the catalog has MIG-backed profiles for g.
func (c *Carver) migModel(g inventory.GPU) bool {
	if c.catalog == nil { // an uncarve needs no catalog
		return false
	}
	for _, p := range c.catalog.ForGPU(g) {
		if p.GPUInstance != nil {
			return true
		}
	}
	return false
}

// carriesMIGType reports whether a VF of g holds a MIG-backed type of the
// catalog: an uncarve then needs NVML.
func (c *Carver) carriesMIGType(g inventory.GPU) bool {
	if g.SRIOV == nil || c.catalog == nil {
		return false
	}
	for _, p := range c.catalog.ForGPU(g) {
		if p.GPUInstance == nil {
			continue
		}
		for _, vf := range g.SRIOV.VFs {
			if vf.NVIDIA != nil && vf.NVIDIA.CurrentType == p.NVIDIA.ID {
				return true
			}
		}
	}
	return false
}

// uncarveMIG adds the GPU instances of a GPU whose VFs are on to its
// uncarve. Only a GPU of a model with MIG-backed profiles asks NVML; one
// that cannot be asked (no library, a static build) is uncarved without
// unless its VFs carry MIG-backed types.
func (c *Carver) uncarveMIG(g inventory.GPU, pl Plan) (Plan, error) {
	if !c.migModel(g) || g.SRIOV == nil || g.SRIOV.NumVFs == 0 {
		return pl, nil
	}
	st, err := c.migState(g.Address)
	if errors.Is(err, nvstate.ErrUnavailable) && !c.carriesMIGType(g) {
		return pl, nil
	}
	if err != nil {
		return pl, fmt.Errorf("uncarve %s: %w", g.Address, err)
	}
	return migTeardown(pl, st), nil
}

// migInverse returns the ops that undo a MIG op, from live state.
func (c *Carver) migInverse(o Op) ([]Op, error) {
	if err := c.needNVML(o.Device); err != nil {
		return nil, err
	}
	switch o.Kind {
	case OpMIGMode:
		m, err := c.mig.Mode(o.Device)
		if err != nil {
			return nil, err
		}
		// Back to the mode asked for before: a change left pending is
		// withdrawn.
		return []Op{{Kind: OpMIGMode, Device: o.Device, Count: boolCount(m.Pending)}}, nil
	case OpGICreate:
		ins, err := c.mig.Instances(o.Device)
		if err != nil {
			return nil, err
		}
		keep := []int{}
		for _, in := range ins {
			keep = append(keep, in.ID)
		}
		return []Op{{Kind: OpGIPrune, Device: o.Device, Keep: keep}}, nil
	case OpGIDestroy:
		in := *o.Instance
		return []Op{{Kind: OpGICreate, Device: o.Device, Count: in.ProfileID, Start: &in.Start}}, nil
	case OpGIPrune:
		return nil, nil
	}
	return nil, fmt.Errorf("unknown op %q", o.Kind)
}

// migExec performs a MIG op; each is idempotent.
func (c *Carver) migExec(o Op) error {
	if err := c.needNVML(o.Device); err != nil {
		return err
	}
	switch o.Kind {
	case OpMIGMode:
		on := o.Count != 0
		m, err := c.mig.Mode(o.Device)
		if err != nil {
			return err
		}
		if m.Current == on && m.Pending == on {
			return nil
		}
		return c.mig.SetMode(o.Device, on)
	case OpGICreate:
		if o.Start != nil {
			// Re-creating what a destroy removed: the destroy may have
			// failed, leaving it there.
			ins, err := c.mig.Instances(o.Device)
			if err != nil {
				return err
			}
			if slices.ContainsFunc(ins, func(in nvstate.Instance) bool { return in.ProfileID == o.Count && in.Start == *o.Start }) {
				return nil
			}
		}
		_, err := c.mig.Create(o.Device, o.Count, o.Start)
		return err
	case OpGIDestroy:
		return c.mig.Destroy(o.Device, o.Instance.ID)
	case OpGIPrune:
		ins, err := c.mig.Instances(o.Device)
		if err != nil {
			return err
		}
		var errs []error
		for _, in := range ins {
			if !slices.Contains(o.Keep, in.ID) {
				errs = append(errs, c.mig.Destroy(o.Device, in.ID))
			}
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("unknown op %q", o.Kind)
}

func boolCount(b bool) int {
	if b {
		return 1
	}
	return 0
}

// withMIGOff makes pl, the plan of a time-sliced nvidia-vf profile, first
// turn MIG off when NVML shows it on: with MIG on the VFs offer no
// time-sliced type, and MIG mode (which an Ampere GPU keeps across
// reboots) changes only with no GPU instance and the VFs off. So every vGPU
// goes, then the instances, the VFs and MIG mode, and the profile is made
// on the bare GPU. Without NVML the plan stays as it was: a look cannot
// see MIG, and the first type write of a change would fail and be undone.
func (c *Carver) withMIGOff(g inventory.GPU, p profile.Plan, original string, pl Plan) (Plan, error) {
	if p.Dialect != inventory.DialectNVIDIAVF || p.GPUInstance != nil || c.mig == nil || !c.migModel(g) {
		return pl, nil
	}
	st, err := c.migState(g.Address)
	if errors.Is(err, nvstate.ErrUnavailable) {
		return pl, nil
	}
	if err != nil {
		return pl, fmt.Errorf("carve %s on %s: %w", p.Profile, g.Address, err)
	}
	if !st.Mode.Current && !st.Mode.Pending {
		return pl, nil
	}
	// An uncarve's teardown, then MIG mode.
	down := Plan{GPU: g.Address, Ops: removeVGPUs(g)}
	off := g
	if g.SRIOV != nil && g.SRIOV.NumVFs > 0 {
		down.Ops = append(down.Ops, disableVFs(g)...)
		s := *g.SRIOV
		s.NumVFs, s.VFs = 0, nil
		off.SRIOV = &s
	}
	down = migTeardown(down, st)
	rest, err := PlanCarve(off, p, original)
	if err != nil {
		return pl, err
	}
	pl.Ops = append(append(down.Ops, Op{Kind: OpMIGMode, Device: g.Address, Count: 0}), rest.Ops...)
	return pl, nil
}
