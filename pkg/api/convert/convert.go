package convert

import (
	"fmt"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
	"github.com/vgpu-project/vgpu/pkg/xe"
)

// each is f of every element of in; nil for nil, so that JSON's null and
// [] stay as they were.
func each[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// address is a's text, "" for the zero address where the wire leaves it
// out.
func address(a pci.Address) string {
	if a.IsZero() {
		return ""
	}
	return a.String()
}

// GPU is g on the wire, with the profile it carries and the one the
// config wants.
func GPU(g inventory.GPU, profile, desired string) api.GPU {
	out := api.GPU{
		Address: g.Address.String(), VendorID: g.VendorID, DeviceID: g.DeviceID, VendorName: g.VendorName,
		DeviceName: g.DeviceName, Class: g.Class, NUMANode: g.NUMANode, IOMMUGroup: g.IOMMUGroup, Driver: g.Driver,
		FramebufferMB: g.FramebufferMB,
		Dialects:      each(g.Dialects, func(d inventory.Dialect) string { return string(d) }),
		Unavailable: each(g.Unavailable, func(u inventory.Unavailable) api.Unavailable {
			return api.Unavailable{Dialect: string(u.Dialect), Reason: u.Reason}
		}),
		BootVGA:     g.BootVGA,
		Guest:       g.Guest,
		MdevTypes:   each(g.MdevTypes, mdevType),
		Peers:       each(g.Peers, peer),
		NVIDIATypes: each(g.NVIDIATypes, vgpuType),
		MIGProfiles: each(g.MIGProfiles, func(p inventory.MIGProfile) api.MIGProfile {
			return api.MIGProfile{ID: p.ID, MemoryMB: p.MemoryMB, Slices: p.Slices, Count: p.Count}
		}),
		Profile: profile,
		Desired: desired,
	}
	if d := g.NVIDIADriver; d != nil {
		out.NVIDIADriver = &api.NVIDIADriver{Version: d.Version, VGPUHost: d.VGPUHost}
	}
	if s := g.SRIOV; s != nil {
		out.SRIOV = &api.SRIOV{TotalVFs: s.TotalVFs, NumVFs: s.NumVFs, VFDeviceID: s.VFDeviceID, VFs: each(s.VFs, vf)}
	}
	if m := g.GIM; m != nil {
		out.GIM = &api.GIMState{VFNum: m.VFNum, SchedOption: m.SchedOption, SchedIntervalMS: m.SchedIntervalMS}
	}
	if x := g.Xe; x != nil {
		out.Xe = &api.XeAdmin{Priority: x.Priority, Quota: x.Quota, Quotas: x.Quotas, VFIODriver: x.VFIODriver,
			VFs: each(x.VFs, func(s xe.Sched) api.XeSched {
				return api.XeSched{ExecQuantumMS: s.ExecQuantumMS, PreemptTimeoutUS: s.PreemptTimeoutUS, Priority: s.Priority}
			})}
	}
	return out
}

func vf(v inventory.VF) api.VF {
	out := api.VF{Index: v.Index, Address: v.Address.String(), Driver: v.Driver, IOMMUGroup: v.IOMMUGroup,
		MdevTypes: each(v.MdevTypes, mdevType)}
	if n := v.NVIDIA; n != nil {
		out.NVIDIA = &api.NVIDIAVF{Creatable: each(n.Creatable, vgpuType), CurrentType: n.CurrentType}
	}
	return out
}

func mdevType(t inventory.MdevType) api.MdevType {
	return api.MdevType{ID: t.ID, Name: t.Name, Description: t.Description, DeviceAPI: t.DeviceAPI,
		AvailableInstances: t.AvailableInstances, MaxInstances: t.MaxInstances, FramebufferMB: t.FramebufferMB,
		Instances: t.Instances}
}

func vgpuType(t inventory.VGPUType) api.VGPUType { return api.VGPUType{ID: t.ID, Name: t.Name} }

func peer(p inventory.Peer) api.Peer {
	return api.Peer{Address: p.Address.String(), Class: p.Class, Driver: p.Driver, Original: p.Original}
}

// VGPU is v on the wire; the caller adds what the host and the ledger say
// of it (NUMA node, driver, state).
func VGPU(v vgpu.VGPU) api.VGPU {
	return api.VGPU{ID: v.ID, GPU: v.GPU, Kind: string(v.Kind), Parent: v.Parent, Type: v.Type, Profile: v.Profile,
		IOMMUGroup: v.IOMMUGroup, Driver: v.Driver, InUse: v.InUse, UseUnknown: v.UseUnknown, Holder: v.Holder}
}

// Pod is the ledger's pod holder on the wire; nil for nil (a domain holds
// the vGPU).
func Pod(p *ledger.Pod) *api.Pod {
	if p == nil {
		return nil
	}
	return &api.Pod{Resource: p.Resource, Namespace: p.Namespace, Name: p.Name, Container: p.Container}
}

// Blockers are bs on the wire.
func Blockers(bs []vgpu.Blocker) []api.Blocker {
	return each(bs, func(b vgpu.Blocker) api.Blocker {
		return api.Blocker{VGPU: b.VGPU, Holder: b.Holder, Unknown: b.Unknown}
	})
}

// CarveResult is a carve's result on the wire.
func CarveResult(r carve.Result, dryRun bool) api.CarveResult {
	p := r.Plan
	return api.CarveResult{Plan: api.Plan{GPU: p.GPU.String(), Parent: p.Parent, Profile: p.Profile,
		Ops: each(p.Ops, op), Blocked: Blockers(p.Blocked)}, Applied: r.Applied, DryRun: dryRun}
}

func op(o carve.Op) api.Op {
	out := api.Op{Kind: string(o.Kind), Device: address(o.Device), VF: o.VF, To: o.To, Count: o.Count,
		Override: o.Override, Parent: o.Parent, Type: o.Type, UUID: o.UUID, Start: o.Start, Keep: o.Keep,
		Params: o.Params, Destroys: o.Destroys, Autoprobe: o.Autoprobe, Attr: o.Attr, Value: o.Value, Bulk: o.Bulk}
	if in := o.Instance; in != nil {
		out.Instance = &api.GPUInstance{ID: in.ID, ProfileID: in.ProfileID, Start: in.Start, Size: in.Size}
	}
	if s := o.Sched; s != nil {
		out.Sched = &api.Sched{Policy: s.Policy, ARR: s.ARR, TimesliceNS: s.TimesliceNS, AvgFactor: s.AvgFactor,
			FrequencyHz: s.FrequencyHz}
	}
	return out
}

// Result is a carve's answer from vgpud as the carver's result, to print
// its plan as a local carve prints it.
func Result(r api.CarveResult) (carve.Result, error) {
	p := r.Plan
	gpu, err := parseAddress("plan.gpu", p.GPU)
	if err != nil {
		return carve.Result{}, err
	}
	out := carve.Result{Plan: carve.Plan{GPU: gpu, Parent: p.Parent, Profile: p.Profile,
		Blocked: each(p.Blocked, func(b api.Blocker) vgpu.Blocker {
			return vgpu.Blocker{VGPU: b.VGPU, Holder: b.Holder, Unknown: b.Unknown}
		}),
	}, Applied: r.Applied}
	if p.Ops != nil {
		out.Plan.Ops = make([]carve.Op, len(p.Ops))
	}
	for i, o := range p.Ops {
		dev, err := parseAddress(fmt.Sprintf("plan.ops[%d].device", i), o.Device)
		if err != nil {
			return carve.Result{}, err
		}
		c := carve.Op{Kind: carve.OpKind(o.Kind), Device: dev, VF: o.VF, To: o.To, Count: o.Count,
			Override: o.Override, Parent: o.Parent, Type: o.Type, UUID: o.UUID, Start: o.Start, Keep: o.Keep,
			Params: o.Params, Destroys: o.Destroys, Autoprobe: o.Autoprobe, Attr: o.Attr, Value: o.Value, Bulk: o.Bulk}
		if in := o.Instance; in != nil {
			c.Instance = &nvstate.Instance{ID: in.ID, ProfileID: in.ProfileID, Start: in.Start, Size: in.Size}
		}
		if s := o.Sched; s != nil {
			c.Sched = &nvstate.Sched{Policy: s.Policy, ARR: s.ARR, TimesliceNS: s.TimesliceNS, AvgFactor: s.AvgFactor,
				FrequencyHz: s.FrequencyHz}
		}
		out.Plan.Ops[i] = c
	}
	return out, nil
}

func parseAddress(field, s string) (pci.Address, error) {
	if s == "" {
		return pci.Address{}, nil
	}
	a, err := pci.ParseAddress(s)
	if err != nil {
		return a, fmt.Errorf("read vgpud's carve answer: %s: %w", field, err)
	}
	return a, nil
}

// Config is c on the wire.
func Config(c *config.Config) api.Config {
	return api.Config{Path: c.Path, Version: c.Version, OnRelease: string(c.OnRelease),
		Socket:  api.ConfigSocket{Group: c.Socket.Group, AdminGroup: c.Socket.AdminGroup},
		Metrics: api.ConfigMetrics{Listen: c.Metrics.Listen},
		Kubernetes: api.ConfigKubernetes{DevicePlugin: c.Kubernetes.DevicePlugin, ResourceDomain: c.Kubernetes.ResourceDomain,
			NVIDIAResourceNames: c.Kubernetes.NVIDIAResourceNames, DevicePluginDir: c.Kubernetes.DevicePluginDir,
			PodResourcesSocket: c.Kubernetes.PodResourcesSocket},
		GPUs: each(c.GPUs, func(e config.Entry) api.ConfigEntry {
			id := ""
			if !e.ID.IsZero() {
				id = e.ID.String()
			}
			return api.ConfigEntry{Address: address(e.Address), ID: id, All: e.All, Parent: e.Parent, Profile: e.Profile,
				MdevUUIDs: e.MdevUUIDs}
		}),
	}
}
