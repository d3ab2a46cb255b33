//go:build cgo

package nvmlstate

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// DefaultLibrary is the NVML library go-nvml opens when no path is given.
const DefaultLibrary = "libnvidia-ml.so.1"

// NVML is the nvstate.Manager over NVIDIA's NVML. Each call opens and closes its
// own NVML session: an open session holds every GPU, and the nvidia driver
// refuses sriov-manage its unbind lock while any NVML client does.
type NVML struct {
	lib  Library
	path string // for messages
}

var _ nvstate.Manager = (*NVML)(nil)

// New returns a nvstate.Manager over the NVML library at path (DefaultLibrary
// when ""). Nothing is loaded until a call needs it.
func New(path string) nvstate.Manager {
	if path == "" {
		return &NVML{lib: goNVML{nvml.New()}, path: DefaultLibrary}
	}
	return &NVML{lib: goNVML{nvml.New(nvml.WithLibraryPath(path))}, path: path}
}

// NewWith returns a nvstate.Manager over lib, such as internal/sim/nvml's
// in-process fake; name names it in messages.
func NewWith(lib Library, name string) *NVML { return &NVML{lib: lib, path: name} }

// session runs f on gpu's device inside one NVML session.
func (m *NVML) session(gpu pci.Address, f func(Device) error) error {
	switch r := m.lib.Init(); r {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("GPU %s: %w: NVIDIA's NVML library %s did not load (MIG-backed vGPU, the vGPU scheduler and mixed-size mode need the NVIDIA host driver's libnvidia-ml; vgpud takes its path with --nvml-library)", gpu, nvstate.ErrUnavailable, m.path)
	default:
		return fmt.Errorf("GPU %s: start NVML (%s): %s", gpu, m.path, m.lib.ErrorString(r))
	}
	defer m.lib.Shutdown()
	dev, r := m.lib.DeviceGetHandleByPciBusId(gpu.String())
	if r != nvml.SUCCESS {
		return fmt.Errorf("GPU %s: NVML finds no such GPU: %s", gpu, m.lib.ErrorString(r))
	}
	return f(dev)
}

// Mode reads the current and the pending MIG mode.
func (m *NVML) Mode(gpu pci.Address) (nvstate.Mode, error) {
	var out nvstate.Mode
	err := m.session(gpu, func(d Device) error {
		cur, pend, r := d.GetMigMode()
		if r != nvml.SUCCESS {
			return fmt.Errorf("GPU %s: read MIG mode: %s", gpu, m.lib.ErrorString(r))
		}
		out = nvstate.Mode{Current: cur == nvml.DEVICE_MIG_ENABLE, Pending: pend == nvml.DEVICE_MIG_ENABLE}
		return nil
	})
	return out, err
}

// SetMode asks for MIG on or off.
func (m *NVML) SetMode(gpu pci.Address, on bool) error {
	mode, word := nvml.DEVICE_MIG_DISABLE, "off"
	if on {
		mode, word = nvml.DEVICE_MIG_ENABLE, "on"
	}
	return m.session(gpu, func(d Device) error {
		act, r := d.SetMigMode(mode)
		switch {
		case r == nvml.ERROR_IN_USE:
			return fmt.Errorf("GPU %s: set MIG mode %s: %w: the driver refuses while GPU instances exist or VFs are enabled", gpu, word, nvstate.ErrInUse)
		case r != nvml.SUCCESS:
			return fmt.Errorf("GPU %s: set MIG mode %s: %s", gpu, word, m.lib.ErrorString(r))
		case act != nvml.SUCCESS:
			return fmt.Errorf("GPU %s: set MIG mode %s: %w (%s): something holds the GPU (its VFs, nvidia-smi, DCGM, a CUDA process); stop it, or reset the GPU", gpu, word, nvstate.ErrPending, m.lib.ErrorString(act))
		}
		return nil
	})
}

// profiles lists the GPU's instance profiles. NVML describes them with MIG
// off too (a real H200 did): whether instances may exist is GetMigMode's.
func profiles(d Device) []nvml.GpuInstanceProfileInfo {
	var out []nvml.GpuInstanceProfileInfo
	for i := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		if info, r := d.GetGpuInstanceProfileInfo(i); r == nvml.SUCCESS {
			out = append(out, info)
		}
	}
	return out
}

// migOn reads whether MIG is on now; a GPU without MIG has it off.
func (m *NVML) migOn(gpu pci.Address, d Device) (bool, error) {
	cur, _, r := d.GetMigMode()
	switch r {
	case nvml.SUCCESS:
		return cur == nvml.DEVICE_MIG_ENABLE, nil
	case nvml.ERROR_NOT_SUPPORTED:
		return false, nil
	}
	return false, fmt.Errorf("GPU %s: read MIG mode: %s", gpu, m.lib.ErrorString(r))
}

// Instances lists the GPU's instances by id; none while MIG is off.
func (m *NVML) Instances(gpu pci.Address) ([]nvstate.Instance, error) {
	out := []nvstate.Instance{}
	err := m.session(gpu, func(d Device) error {
		if on, err := m.migOn(gpu, d); err != nil || !on {
			return err
		}
		for _, p := range profiles(d) {
			gis, r := d.GetGpuInstances(&p)
			if r != nvml.SUCCESS {
				return fmt.Errorf("GPU %s: list GPU instances of profile %d: %s", gpu, p.Id, m.lib.ErrorString(r))
			}
			for _, gi := range gis {
				info, r := gi.GetInfo()
				if r != nvml.SUCCESS {
					return fmt.Errorf("GPU %s: read a GPU instance of profile %d: %s", gpu, p.Id, m.lib.ErrorString(r))
				}
				out = append(out, instance(info))
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b nvstate.Instance) int { return a.ID - b.ID })
	return out, err
}

// Sizes reads the GPU's memory total (nvmlDeviceGetMemoryInfo) and its GPU
// instance profiles as NVML states them, MIG on or off.
func (m *NVML) Sizes(gpu pci.Address) (nvstate.Sizes, error) {
	var out nvstate.Sizes
	err := m.session(gpu, func(d Device) error {
		mem, r := d.GetMemoryInfo()
		if r != nvml.SUCCESS {
			return fmt.Errorf("GPU %s: read its memory: %s", gpu, m.lib.ErrorString(r))
		}
		out.TotalMB = mem.Total >> 20
		for _, p := range profiles(d) {
			out.Profiles = append(out.Profiles, nvstate.GIProfile{ID: int(p.Id), MemoryMB: p.MemorySizeMB,
				Slices: int(p.SliceCount), Count: int(p.InstanceCount)})
		}
		return nil
	})
	return out, err
}

func instance(info nvml.GpuInstanceInfo) nvstate.Instance {
	return nvstate.Instance{ID: int(info.Id), ProfileID: int(info.ProfileId), Start: int(info.Placement.Start), Size: int(info.Placement.Size)}
}

// Create makes an instance of profile id, at start when given.
func (m *NVML) Create(gpu pci.Address, profileID int, start *int) (nvstate.Instance, error) {
	var out nvstate.Instance
	err := m.session(gpu, func(d Device) error {
		if on, err := m.migOn(gpu, d); err != nil {
			return err
		} else if !on {
			return fmt.Errorf("GPU %s: create a GPU instance of profile %d: MIG is off", gpu, profileID)
		}
		i := slices.IndexFunc(profiles(d), func(p nvml.GpuInstanceProfileInfo) bool { return int(p.Id) == profileID })
		if i < 0 {
			return fmt.Errorf("GPU %s: create a GPU instance of profile %d: the GPU offers no such profile", gpu, profileID)
		}
		p := profiles(d)[i]
		var gi GpuInstance
		var r nvml.Return
		if start == nil {
			gi, r = d.CreateGpuInstance(&p)
		} else {
			// A placement's size is in memory slices, which the profile
			// does not state: take it from the possible placements.
			pls, _ := d.GetGpuInstancePossiblePlacements(&p)
			pl := nvml.GpuInstancePlacement{Start: uint32(*start)}
			for _, x := range pls {
				if int(x.Start) == *start {
					pl = x
				}
			}
			gi, r = d.CreateGpuInstanceWithPlacement(&p, &pl)
		}
		switch r {
		case nvml.SUCCESS:
		case nvml.ERROR_INSUFFICIENT_RESOURCES:
			return fmt.Errorf("GPU %s: create a GPU instance of profile %d: %w", gpu, profileID, nvstate.ErrNoRoom)
		default:
			return fmt.Errorf("GPU %s: create a GPU instance of profile %d: %s", gpu, profileID, m.lib.ErrorString(r))
		}
		info, r := gi.GetInfo()
		if r != nvml.SUCCESS {
			return fmt.Errorf("GPU %s: read the new GPU instance of profile %d: %s", gpu, profileID, m.lib.ErrorString(r))
		}
		out = instance(info)
		return nil
	})
	return out, err
}

// Destroy removes instance id; one already gone is not an error.
func (m *NVML) Destroy(gpu pci.Address, id int) error {
	return m.session(gpu, func(d Device) error {
		gi, r := d.GetGpuInstanceById(id)
		switch r {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_FOUND:
			return nil
		default:
			return fmt.Errorf("GPU %s: find GPU instance %d: %s", gpu, id, m.lib.ErrorString(r))
		}
		switch r := gi.Destroy(); r {
		case nvml.SUCCESS:
			return nil
		case nvml.ERROR_IN_USE:
			return fmt.Errorf("GPU %s: destroy GPU instance %d: %w: a vGPU, compute instance or process uses it", gpu, id, nvstate.ErrInUse)
		default:
			return fmt.Errorf("GPU %s: destroy GPU instance %d: %s", gpu, id, m.lib.ErrorString(r))
		}
	})
}

// Scheduler reads the GPU's vGPU scheduler (nvmlDeviceGetVgpuSchedulerState).
// Its parameters are a C union: avgFactor then timeslice with ARR on,
// timeslice alone with it off.
func (m *NVML) Scheduler(gpu pci.Address) (nvstate.Sched, error) {
	var out nvstate.Sched
	err := m.session(gpu, func(d Device) error {
		st, r := d.GetVgpuSchedulerState()
		if r != nvml.SUCCESS {
			return fmt.Errorf("GPU %s: read the vGPU scheduler: %s", gpu, m.lib.ErrorString(r))
		}
		out = nvstate.Sched{Policy: int(st.SchedulerPolicy), ARR: int(st.ArrMode)}
		p := st.SchedulerParams[:]
		if st.ArrMode == nvml.VGPU_SCHEDULER_ARR_ENABLE {
			out.AvgFactor = binary.NativeEndian.Uint32(p[0:4])
			out.TimesliceNS = binary.NativeEndian.Uint32(p[4:8])
		} else {
			out.TimesliceNS = binary.NativeEndian.Uint32(p[0:4])
		}
		return nil
	})
	return out, err
}

// SetScheduler sets it (nvmlDeviceSetVgpuSchedulerState): with ARR on its
// parameters are avgFactor and frequency, otherwise the time slice.
func (m *NVML) SetScheduler(gpu pci.Address, s nvstate.Sched) error {
	st := nvml.VgpuSchedulerSetState{SchedulerPolicy: uint32(s.Policy), EnableARRMode: uint32(s.ARR)}
	p := st.SchedulerParams[:]
	if s.ARR == nvstate.ARREnable {
		binary.NativeEndian.PutUint32(p[0:4], s.AvgFactor)
		binary.NativeEndian.PutUint32(p[4:8], s.FrequencyHz)
	} else {
		binary.NativeEndian.PutUint32(p[0:4], s.TimesliceNS)
	}
	return m.session(gpu, func(d Device) error {
		switch r := d.SetVgpuSchedulerState(&st); r {
		case nvml.SUCCESS:
			return nil
		case nvml.ERROR_NOT_SUPPORTED:
			return fmt.Errorf("GPU %s: set the vGPU scheduler: the driver takes it only while no vGPU exists on the GPU, MIG is off and the GPU is in vGPU host mode, and no fixed share in mixed-size mode (%s)", gpu, m.lib.ErrorString(r))
		default:
			return fmt.Errorf("GPU %s: set the vGPU scheduler: %s", gpu, m.lib.ErrorString(r))
		}
	})
}

// VGPUTypes lists the GPU's supported vGPU types with their names.
func (m *NVML) VGPUTypes(gpu pci.Address) ([]nvstate.VGPUType, error) {
	var out []nvstate.VGPUType
	err := m.session(gpu, func(d Device) error {
		ids, r := d.GetSupportedVgpus()
		if r != nvml.SUCCESS {
			return fmt.Errorf("GPU %s: list its supported vGPU types: %s", gpu, m.lib.ErrorString(r))
		}
		for _, id := range ids {
			name, r := id.GetName()
			if r != nvml.SUCCESS {
				return fmt.Errorf("GPU %s: read the name of vGPU type %d: %s", gpu, id.GetID(), m.lib.ErrorString(r))
			}
			out = append(out, nvstate.VGPUType{ID: int(id.GetID()), Name: name})
		}
		return nil
	})
	return out, err
}

// MixedSize reads the GPU's vGPU heterogeneous mode
// (nvmlDeviceGetVgpuHeterogeneousMode).
func (m *NVML) MixedSize(gpu pci.Address) (bool, error) {
	var on bool
	err := m.session(gpu, func(d Device) error {
		mode, r := d.GetVgpuHeterogeneousMode()
		switch r {
		case nvml.SUCCESS:
			on = mode.Mode == uint32(nvml.FEATURE_ENABLED)
			return nil
		case nvml.ERROR_NOT_SUPPORTED:
			return fmt.Errorf("GPU %s: read its mixed-size mode: %w: the GPU has no vGPU mixed-size (heterogeneous) mode, or MIG is on", gpu, nvstate.ErrNotSupported)
		default:
			return fmt.Errorf("GPU %s: read its mixed-size mode: %s", gpu, m.lib.ErrorString(r))
		}
	})
	return on, err
}

// SetMixedSize sets it (nvmlDeviceSetVgpuHeterogeneousMode).
func (m *NVML) SetMixedSize(gpu pci.Address, on bool) error {
	mode, word := nvml.VgpuHeterogeneousMode{Mode: uint32(nvml.FEATURE_DISABLED)}, "off"
	if on {
		mode.Mode, word = uint32(nvml.FEATURE_ENABLED), "on"
	}
	return m.session(gpu, func(d Device) error {
		switch r := d.SetVgpuHeterogeneousMode(mode); r {
		case nvml.SUCCESS:
			return nil
		case nvml.ERROR_IN_USE:
			return fmt.Errorf("GPU %s: turn mixed-size mode %s: %w: the driver takes it only while no vGPU exists on the GPU", gpu, word, nvstate.ErrInUse)
		case nvml.ERROR_NOT_SUPPORTED:
			return fmt.Errorf("GPU %s: turn mixed-size mode %s: %w: the GPU has no mixed-size mode, MIG is on, or (NVIDIA supports no fixed share in it) its vGPU scheduler is fixed share", gpu, word, nvstate.ErrNotSupported)
		default:
			return fmt.Errorf("GPU %s: turn mixed-size mode %s: %s", gpu, word, m.lib.ErrorString(r))
		}
	})
}

// Virtualization reads the GPU's virtualization mode and, where the
// driver has one, its host vGPU mode.
func (m *NVML) Virtualization(gpu pci.Address) (nvstate.Virt, error) {
	var v nvstate.Virt
	err := m.session(gpu, func(d Device) error {
		mode, r := d.GetVirtualizationMode()
		if r != nvml.SUCCESS {
			return fmt.Errorf("GPU %s: read its virtualization mode: %s", gpu, m.lib.ErrorString(r))
		}
		modes := []string{nvstate.VirtNone, nvstate.VirtPassthrough, nvstate.VirtVGPU, nvstate.VirtHostVGPU, nvstate.VirtHostVSGA}
		if int(mode) >= len(modes) {
			return fmt.Errorf("GPU %s: read its virtualization mode: unknown mode %d", gpu, mode)
		}
		v.Mode = modes[mode]
		switch host, r := d.GetHostVgpuMode(); {
		case r == nvml.ERROR_NOT_SUPPORTED:
		case r != nvml.SUCCESS:
			return fmt.Errorf("GPU %s: read its host vGPU mode: %s", gpu, m.lib.ErrorString(r))
		case host == nvml.HOST_VGPU_MODE_SRIOV:
			v.HostVGPU = nvstate.HostVGPUSRIOV
		default:
			v.HostVGPU = nvstate.HostVGPUNonSRIOV
		}
		return nil
	})
	return v, err
}
