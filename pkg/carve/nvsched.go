package carve

import (
	"fmt"
	"slices"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

// wantSched is the NVML scheduler a profile asks for.
func wantSched(s *profile.NVScheduler) nvstate.Sched {
	out := nvstate.Sched{Policy: slices.Index(profile.NVSchedulerPolicies(), s.Policy) + 1, ARR: nvstate.ARRDefault}
	switch {
	case s.Adaptive:
		out.ARR = nvstate.ARREnable
	case s.TimesliceMS > 0:
		out.ARR, out.TimesliceNS = nvstate.ARRDisable, uint32(s.TimesliceMS)*1_000_000
	}
	return out
}

// sameSched reports whether cur is what want asks: what want leaves to the
// driver (the ARR mode, the time slice) is not compared.
func sameSched(cur, want nvstate.Sched) bool {
	switch {
	case cur.Policy != want.Policy:
		return false
	case want.Policy == nvstate.PolicyBestEffort:
		return true
	case want.ARR != nvstate.ARRDefault && cur.ARR != want.ARR:
		return false
	}
	return want.TimesliceNS == 0 || cur.TimesliceNS == want.TimesliceNS
}

func schedString(s nvstate.Sched) string {
	name := fmt.Sprintf("policy %d", s.Policy)
	if s.Policy >= 1 && s.Policy <= len(profile.NVSchedulerPolicies()) {
		name = profile.NVSchedulerPolicies()[s.Policy-1]
	}
	switch {
	case s.Policy == nvstate.PolicyBestEffort:
		return name
	case s.ARR == nvstate.ARREnable:
		return name + ", adaptive round robin"
	case s.TimesliceNS > 0:
		return fmt.Sprintf("%s, %d ms slices", name, s.TimesliceNS/1_000_000)
	}
	return name
}

// withScheduler makes pl, the plan of a profile that sets NVIDIA's vGPU
// scheduler, also set it when NVML shows another. NVML takes a scheduler
// only while no vGPU exists on the GPU: every vGPU goes first (in use:
// refused unless forced), then the scheduler, then the profile's vGPUs
// are made on the bare GPU. A dry run without NVML cannot see it.
func (c *Carver) withScheduler(g inventory.GPU, p profile.Plan, original string, pl Plan) (Plan, error) {
	if err := c.needNVML(g.Address); err != nil {
		return pl, fmt.Errorf("carve %s on %s: the vGPU scheduler is set by NVML: %w", p.Profile, g.Address, err)
	}
	cur, err := c.mig.Scheduler(g.Address)
	if err != nil {
		return pl, fmt.Errorf("carve %s on %s: %w", p.Profile, g.Address, err)
	}
	want := wantSched(p.Scheduler)
	if sameSched(cur, want) {
		return pl, nil
	}
	rest, err := PlanCarve(bare(g), p, original)
	if err != nil {
		return pl, err
	}
	ops := append(removeVGPUs(g), Op{Kind: OpNVScheduler, Device: g.Address, Sched: &want})
	pl.Ops = append(ops, rest.Ops...)
	return pl, nil
}

// bare is g as it is once its vGPUs are gone: no mdevs, no NVIDIA types
// (each mdev type's room back to its maximum).
func bare(g inventory.GPU) inventory.GPU {
	clearTypes := func(ts []inventory.MdevType) []inventory.MdevType {
		out := slices.Clone(ts)
		for i := range out {
			out[i].Instances = nil
			if out[i].MaxInstances > 0 {
				out[i].AvailableInstances = out[i].MaxInstances
			}
		}
		return out
	}
	g.MdevTypes = clearTypes(g.MdevTypes)
	if g.SRIOV != nil {
		s := *g.SRIOV
		s.VFs = slices.Clone(s.VFs)
		for i, vf := range s.VFs {
			vf.MdevTypes = clearTypes(vf.MdevTypes)
			if vf.NVIDIA != nil {
				nv := *vf.NVIDIA
				nv.CurrentType = 0
				vf.NVIDIA = &nv
			}
			s.VFs[i] = vf
		}
		g.SRIOV = &s
	}
	return g
}

// schedInverse reads the scheduler an OpNVScheduler is about to change.
func (c *Carver) schedInverse(o Op) ([]Op, error) {
	if err := c.needNVML(o.Device); err != nil {
		return nil, err
	}
	cur, err := c.mig.Scheduler(o.Device)
	if err != nil {
		return nil, err
	}
	return []Op{{Kind: OpNVScheduler, Device: o.Device, Sched: &cur}}, nil
}

// schedExec performs an OpNVScheduler; one already in place is not set.
func (c *Carver) schedExec(o Op) error {
	if err := c.needNVML(o.Device); err != nil {
		return err
	}
	if cur, err := c.mig.Scheduler(o.Device); err == nil && sameSched(cur, *o.Sched) {
		return nil
	}
	return c.mig.SetScheduler(o.Device, *o.Sched)
}

// ProfileOfSched is ProfileOf that tells apart profiles of one shape by
// NVIDIA's vGPU scheduler and mixed-size mode, which sysfs does not show:
// it names the one whose scheduler and mode m reads on g, else one that
// asks for neither, else the first. m is asked only when such profiles
// exist (nil: never).
func ProfileOfSched(g inventory.GPU, catalog *profile.Catalog, m nvstate.Manager) string {
	first, plain := "", ""
	var cur *nvstate.Sched
	mixed, asked := false, false
	for _, p := range pinnedFirst(catalog.ForGPU(g)) {
		if !Carries(g, catalog, p.Name) {
			continue
		}
		if first == "" {
			first = p.Name
		}
		if p.Scheduler == nil && !p.MixedSize {
			if plain == "" {
				plain = p.Name
			}
			continue
		}
		if !asked && m != nil {
			asked = true
			if s, err := m.Scheduler(g.Address); err == nil {
				cur = &s
			}
			mixed, _ = m.MixedSize(g.Address) // unread: not in the mode
		}
		schedOK := p.Scheduler == nil || cur != nil && sameSched(*cur, wantSched(p.Scheduler))
		if asked && schedOK && (!p.MixedSize || mixed) {
			return p.Name
		}
	}
	if plain != "" {
		return plain
	}
	return first
}
