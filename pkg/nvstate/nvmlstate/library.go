//go:build cgo

package nvmlstate

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// Library is what vgpu asks of NVML: the calls of this package, no more.
// Library(nvml.New()) is NVIDIA's library behind it (go-nvml, which loads
// libnvidia-ml); internal/sim/nvml's Server is the in-process fake.
type Library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	ErrorString(nvml.Return) string
	DeviceGetHandleByPciBusId(busID string) (Device, nvml.Return)
}

// Device is one GPU as this package uses it.
type Device interface {
	GetMigMode() (current, pending int, r nvml.Return)
	SetMigMode(mode int) (r, activation nvml.Return)
	GetMemoryInfo() (nvml.Memory, nvml.Return)
	GetGpuInstanceProfileInfo(index int) (nvml.GpuInstanceProfileInfo, nvml.Return)
	GetGpuInstancePossiblePlacements(*nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return)
	CreateGpuInstance(*nvml.GpuInstanceProfileInfo) (GpuInstance, nvml.Return)
	CreateGpuInstanceWithPlacement(*nvml.GpuInstanceProfileInfo, *nvml.GpuInstancePlacement) (GpuInstance, nvml.Return)
	GetGpuInstances(*nvml.GpuInstanceProfileInfo) ([]GpuInstance, nvml.Return)
	GetGpuInstanceById(id int) (GpuInstance, nvml.Return)
	GetSupportedVgpus() ([]VgpuType, nvml.Return)
	GetVgpuHeterogeneousMode() (nvml.VgpuHeterogeneousMode, nvml.Return)
	SetVgpuHeterogeneousMode(nvml.VgpuHeterogeneousMode) nvml.Return
	GetVgpuSchedulerState() (nvml.VgpuSchedulerGetState, nvml.Return)
	SetVgpuSchedulerState(*nvml.VgpuSchedulerSetState) nvml.Return
	GetVirtualizationMode() (nvml.GpuVirtualizationMode, nvml.Return)
	GetHostVgpuMode() (nvml.HostVgpuMode, nvml.Return)
}

// GpuInstance is one MIG GPU instance.
type GpuInstance interface {
	GetInfo() (nvml.GpuInstanceInfo, nvml.Return)
	Destroy() nvml.Return
}

// VgpuType is one vGPU type a GPU supports.
type VgpuType interface {
	GetID() uint32
	GetName() (string, nvml.Return)
}

// goNVML is go-nvml's library as a Library: its handles are wrapped so that
// what they return is this package's interfaces.
type goNVML struct{ nvml.Interface }

var _ Library = goNVML{}

func (l goNVML) DeviceGetHandleByPciBusId(busID string) (Device, nvml.Return) {
	d, r := l.Interface.DeviceGetHandleByPciBusId(busID)
	if d == nil {
		return nil, r
	}
	return goDevice{d}, r
}

type goDevice struct{ nvml.Device }

func (d goDevice) CreateGpuInstance(p *nvml.GpuInstanceProfileInfo) (GpuInstance, nvml.Return) {
	gi, r := d.Device.CreateGpuInstance(p)
	return instanceOrNil(gi), r
}

func (d goDevice) CreateGpuInstanceWithPlacement(p *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (GpuInstance, nvml.Return) {
	gi, r := d.Device.CreateGpuInstanceWithPlacement(p, pl)
	return instanceOrNil(gi), r
}

func (d goDevice) GetGpuInstances(p *nvml.GpuInstanceProfileInfo) ([]GpuInstance, nvml.Return) {
	gis, r := d.Device.GetGpuInstances(p)
	out := make([]GpuInstance, len(gis))
	for i, gi := range gis {
		out[i] = gi
	}
	return out, r
}

func (d goDevice) GetGpuInstanceById(id int) (GpuInstance, nvml.Return) {
	gi, r := d.Device.GetGpuInstanceById(id)
	return instanceOrNil(gi), r
}

func (d goDevice) GetSupportedVgpus() ([]VgpuType, nvml.Return) {
	ids, r := d.Device.GetSupportedVgpus()
	out := make([]VgpuType, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out, r
}

// instanceOrNil keeps a nil instance nil (not a non-nil interface holding
// a nil one).
func instanceOrNil(gi nvml.GpuInstance) GpuInstance {
	if gi == nil {
		return nil
	}
	return gi
}
