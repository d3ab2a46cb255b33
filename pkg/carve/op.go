package carve

import (
	"fmt"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// OpKind names the kernel operation an Op performs.
type OpKind string

const (
	// OpDriver moves a device to driver To ("" = unbind).
	OpDriver OpKind = "driver"
	// OpNumVFs sets a PF's sriov_numvfs to Count.
	OpNumVFs OpKind = "numvfs"
	// OpMdevCreate creates mdev UUID of Type on Parent.
	OpMdevCreate OpKind = "mdev-create"
	// OpMdevRemove removes mdev UUID (Parent and Type kept for its undo).
	OpMdevRemove OpKind = "mdev-remove"
	// OpNVType writes Count to a VF's nvidia/current_vgpu_type (0 frees it).
	OpNVType OpKind = "nvidia-type"
	// OpAutoprobe sets a PF's sriov_drivers_autoprobe to Autoprobe (undo only).
	OpAutoprobe OpKind = "autoprobe"
	// OpSriovManage enables every VF of an NVIDIA PF (Count 1) or disables
	// them (Count 0) with NVIDIA's sriov-manage: the nvidia driver has no
	// sriov_configure, and NVIDIA supports no other way
	// (docs/vendors/nvidia.md, "VFs: only through sriov-manage").
	OpSriovManage OpKind = "sriov-manage"
	// OpGIMReload reloads old AMD GIM with vf_num=Count, which re-creates
	// the VFs of every GPU it drives: its only way to change the count.
	OpGIMReload OpKind = "gim-reload"
	// OpAMDSMINumVF makes new AMD GIM give PF Device Count VFs with
	// amd-smi set --num-vf, which re-creates them: its only way at run
	// time (the driver has no sriov_configure).
	OpAMDSMINumVF OpKind = "amd-smi-num-vf"
	// OpXeSched writes Value to Intel xe's profile attribute Attr (its
	// scheduling, or vram_quota) of VF VF of PF Device
	// (sriov_admin/vfN/profile), of the PF itself (VF nil), or of every
	// function (Bulk: .bulk_profile, a VF priority's only way).
	OpXeSched OpKind = "xe-sched"
	// OpNVScheduler sets NVIDIA's vGPU scheduler of GPU Device to Sched,
	// by NVML, which takes it only while no vGPU exists on the GPU.
	OpNVScheduler OpKind = "nvidia-scheduler"
	// OpNVMixedSize turns NVIDIA's mixed-size mode of GPU Device on
	// (Count 1) or off (Count 0), by NVML; only while no vGPU exists on it.
	OpNVMixedSize OpKind = "nvidia-mixed-size"
	// OpMIGMode turns a GPU's MIG mode on (Count 1) or off (Count 0), by NVML.
	OpMIGMode OpKind = "mig-mode"
	// OpGICreate creates a GPU instance of profile id Count (Type names
	// it) on GPU Device; at memory slice Start when set.
	OpGICreate OpKind = "gpu-instance-create"
	// OpGIDestroy destroys GPU instance Instance.ID of GPU Device.
	OpGIDestroy OpKind = "gpu-instance-destroy"
	// OpGIPrune destroys every GPU instance of Device not in Keep: the undo
	// of an OpGICreate, whose instance id the driver chooses.
	OpGIPrune OpKind = "gpu-instance-prune"
	// OpNVParams writes Value, NVIDIA's vGPU plugin parameters ("" clears
	// them), to mdev UUID's nvidia/vgpu_params, or to VF Device's when UUID
	// is "".
	OpNVParams OpKind = "nvidia-params"
)

// Op is one kernel change. Device ops name the device either directly
// (Device) or as VF index VF of PF Device, since VFs that a plan enables do
// not exist yet when it is made.
type Op struct {
	Kind   OpKind      `json:"kind"`
	Device pci.Address `json:"device,omitzero"`
	VF     *int        `json:"vf,omitempty"`
	To     string      `json:"to,omitempty"`    // OpDriver: target driver
	Count  int         `json:"count,omitempty"` // OpNumVFs: VFs; OpNVType: type id
	// Override, when set, is written to driver_override after the move
	// ("" clears it); undo uses it to restore the device exactly.
	Override *string `json:"override,omitempty"`
	Parent   string  `json:"parent,omitempty"` // mdev parent
	Type     string  `json:"type,omitempty"`   // mdev type id
	UUID     string  `json:"uuid,omitempty"`
	// Start is an OpGICreate's placement (nil: the driver chooses).
	Start *int `json:"start,omitempty"`
	// Instance is the GPU instance an OpGIDestroy removes, kept whole so
	// that its undo re-creates it where it was.
	Instance *nvstate.Instance `json:"instance,omitempty"`
	// Keep lists the GPU instances an OpGIPrune leaves.
	Keep []int `json:"keep,omitempty"`
	// Sched is an OpNVScheduler's scheduler.
	Sched *nvstate.Sched `json:"sched,omitempty"`
	// Params are module parameters an OpGIMReload passes besides vf_num.
	Params []string `json:"params,omitempty"`
	// Destroys marks ops that tear down an existing vGPU; Plan checks its use.
	Destroys string `json:"destroys,omitempty"`
	// Autoprobe, on an OpNumVFs that enables VFs, is the PF's
	// sriov_drivers_autoprobe while they appear, restored right after: off
	// for VFs bound for vfio-pci, so that the PF's VF driver (amdgpu, igbvf,
	// nvme) never probes them first.
	Autoprobe *bool `json:"autoprobe,omitempty"`
	// Attr, Value and Bulk: an OpXeSched's attribute, value and reach;
	// Value is also an OpNVParams' parameters.
	Attr  string `json:"attr,omitempty"`
	Value string `json:"value,omitempty"`
	Bulk  bool   `json:"bulk,omitempty"`
}

func vfIndex(i int) *int { return &i }

func (o Op) target() string {
	if o.VF != nil {
		return fmt.Sprintf("VF %d of %s", *o.VF, o.Device)
	}
	return o.Device.String()
}

// String describes the op for plans and logs.
func (o Op) String() string {
	switch o.Kind {
	case OpDriver:
		if o.To == "" {
			return "unbind " + o.target()
		}
		return fmt.Sprintf("bind %s to %s", o.target(), o.To)
	case OpNumVFs:
		if o.Autoprobe != nil && !*o.Autoprobe && o.Count > 0 {
			return fmt.Sprintf("set %s sriov_numvfs to %d (VF driver autoprobe off)", o.Device, o.Count)
		}
		return fmt.Sprintf("set %s sriov_numvfs to %d", o.Device, o.Count)
	case OpMdevCreate:
		return fmt.Sprintf("create mdev %s of type %s on %s", o.UUID, o.Type, o.Parent)
	case OpMdevRemove:
		return fmt.Sprintf("remove mdev %s (type %s on %s)", o.UUID, o.Type, o.Parent)
	case OpAutoprobe:
		return fmt.Sprintf("set %s sriov_drivers_autoprobe to %v", o.Device, *o.Autoprobe)
	case OpSriovManage:
		if o.Count == 0 {
			return fmt.Sprintf("disable the VFs of %s (sriov-manage -d)", o.Device)
		}
		return fmt.Sprintf("enable every VF of %s (sriov-manage -e)", o.Device)
	case OpGIMReload:
		s := fmt.Sprintf("reload gim with %s for %s (every GPU gim drives gets %d VFs",
			strings.Join(append([]string{fmt.Sprintf("vf_num=%d", o.Count)}, o.Params...), " "), o.Device, o.Count)
		if o.Autoprobe != nil && !*o.Autoprobe {
			s += "; VF driver autoprobe off"
		}
		return s + ")"
	case OpAMDSMINumVF:
		s := fmt.Sprintf("set the VF count of %s to %d (amd-smi set --num-vf; gim re-creates the VFs", o.Device, o.Count)
		if o.Autoprobe != nil && !*o.Autoprobe {
			s += "; VF driver autoprobe off"
		}
		return s + ")"
	case OpNVScheduler:
		return fmt.Sprintf("set the vGPU scheduler of %s to %s (NVML)", o.Device, schedString(*o.Sched))
	case OpNVMixedSize:
		if o.Count == 0 {
			return fmt.Sprintf("turn mixed-size mode off on %s (NVML)", o.Device)
		}
		return fmt.Sprintf("turn mixed-size mode on on %s (NVML)", o.Device)
	case OpXeSched:
		switch {
		case o.Bulk:
			return fmt.Sprintf("set %s of every function of %s to %s (xe)", o.Attr, o.Device, o.Value)
		case o.VF == nil:
			return fmt.Sprintf("set %s of the PF %s to %s (xe)", o.Attr, o.Device, o.Value)
		}
		return fmt.Sprintf("set %s of %s to %s (xe)", o.Attr, o.target(), o.Value)
	case OpMIGMode:
		if o.Count == 0 {
			return fmt.Sprintf("turn MIG mode off on %s", o.Device)
		}
		return fmt.Sprintf("turn MIG mode on on %s", o.Device)
	case OpGICreate:
		if o.Type == "" {
			return fmt.Sprintf("re-create a GPU instance of profile %d on %s at slice %d", o.Count, o.Device, *o.Start)
		}
		if o.Start != nil {
			return fmt.Sprintf("create a %s GPU instance (profile %d) on %s at slice %d", o.Type, o.Count, o.Device, *o.Start)
		}
		return fmt.Sprintf("create a %s GPU instance (profile %d) on %s", o.Type, o.Count, o.Device)
	case OpGIDestroy:
		return fmt.Sprintf("destroy GPU instance %d (profile %d) of %s", o.Instance.ID, o.Instance.ProfileID, o.Device)
	case OpGIPrune:
		return fmt.Sprintf("destroy the GPU instances of %s other than %v", o.Device, o.Keep)
	case OpNVParams:
		what := o.UUID
		if what == "" {
			what = o.Device.String()
		}
		if o.Value == "" {
			return "clear the vGPU plugin parameters of " + what
		}
		return fmt.Sprintf("set the vGPU plugin parameters of %s to %q", what, o.Value)
	case OpNVType:
		if o.Count == 0 {
			return "clear vGPU type of " + o.target()
		}
		return fmt.Sprintf("set vGPU type of %s to %d", o.target(), o.Count)
	}
	return string(o.Kind)
}

// Plan is what a carve or uncarve of one GPU would change.
type Plan struct {
	GPU pci.Address `json:"gpu"`
	// Parent is the virtual mdev parent the plan changes ("" for a GPU).
	Parent  string `json:"parent,omitempty"`
	Profile string `json:"profile,omitempty"` // "" for an uncarve
	Ops     []Op   `json:"ops"`
	// Blocked lists the vGPUs in use, or of unknown use, that the plan
	// would destroy.
	Blocked []vgpu.Blocker `json:"blocked,omitempty"`
}

// Target is what the plan changes: the GPU or the virtual parent.
func (p Plan) Target() vgpu.Target { return vgpu.Target{GPU: p.GPU, Parent: p.Parent} }

// Empty reports whether the GPU is already as wanted.
func (p Plan) Empty() bool { return len(p.Ops) == 0 }

// String lists the ops one per line.
func (p Plan) String() string {
	var b strings.Builder
	for i, o := range p.Ops {
		fmt.Fprintf(&b, "%2d. %s\n", i+1, o)
	}
	return b.String()
}
