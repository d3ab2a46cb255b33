package simnvml

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
)

var (
	_ nvmlstate.Library     = (*Server)(nil)
	_ nvmlstate.Device      = (*Device)(nil)
	_ nvmlstate.GpuInstance = (*GpuInstance)(nil)
	_ nvmlstate.VgpuType    = VgpuType{}
)

// GPU names one physical GPU for New.
type GPU struct {
	Model string // one of Models()
	BusID string // PCI address in NVML or sysfs form
}

// Server is the fake library. It implements nvmlstate.Library, the calls
// vgpu makes, and a few more its tests use.
type Server struct {
	mu      sync.Mutex
	refs    int       // Init minus Shutdown calls; NVML is usable while > 0
	devices []*Device // in PCI address order, which is the NVML index
	// vgpus counts the vGPUs on a GPU (SetVGPUs); nil: none.
	vgpus func(bus string) int
	// driver is the NVIDIA driver the library is of (SetDriver).
	driver Driver
}

// New builds a Server holding gpus. MIG starts disabled on each, as on a new
// board.
func New(gpus ...GPU) (*Server, error) {
	s := &Server{}
	for _, g := range gpus {
		m, ok := lookupModel(g.Model)
		if !ok {
			return nil, fmt.Errorf("unknown GPU model %q", g.Model)
		}
		a, err := parsePCIAddr(g.BusID)
		if err != nil {
			return nil, err
		}
		for _, d := range s.devices {
			if d.addr == a {
				return nil, fmt.Errorf("duplicate PCI address %s", a.String())
			}
		}
		s.devices = append(s.devices, &Device{
			s:    s,
			addr: a,
			m:    m,
			// Stable per address, so a test can hard-code it.
			uuid: "GPU-" + uuid.NewSHA1(uuid.NameSpaceOID, []byte("simnvml/"+a.String())).String(),
			gis:  map[uint32]*GpuInstance{},
		})
	}
	// NVML gives no ordering guarantee; enumerating by PCI address is what
	// hosts show in practice and keeps indices deterministic.
	slices.SortFunc(s.devices, func(a, b *Device) int {
		if a.addr.Less(b.addr) {
			return -1
		}
		return 1
	})
	for i, d := range s.devices {
		d.index = i
	}
	return s, nil
}

var errUnknownGPU = errors.New("no such GPU")

// device finds a GPU by PCI address for the test hooks. Caller holds s.mu.
func (s *Server) device(bus string) (*Device, error) {
	a, err := parsePCIAddr(bus)
	if err != nil {
		return nil, err
	}
	for _, d := range s.devices {
		if d.addr == a {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", errUnknownGPU, a.String())
}

// Init starts a library session; sessions nest as in NVML.
func (s *Server) Init() nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refs++
	return nvml.SUCCESS
}

// Shutdown ends one Init.
func (s *Server) Shutdown() nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	s.refs--
	return nvml.SUCCESS
}

// ErrorString uses go-nvml's own table, which needs no library.
func (s *Server) ErrorString(r nvml.Return) string { return r.Error() }

// DeviceGetCount counts the GPUs given to New.
func (s *Server) DeviceGetCount() (int, nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs == 0 {
		return 0, nvml.ERROR_UNINITIALIZED
	}
	return len(s.devices), nvml.SUCCESS
}

// DeviceGetHandleByIndex returns the GPU at an NVML index.
func (s *Server) DeviceGetHandleByIndex(i int) (*Device, nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs == 0 {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	if i < 0 || i >= len(s.devices) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return s.devices[i], nvml.SUCCESS
}

// DeviceGetHandleByPciBusId accepts the formats nvml.h lists, which include
// the sysfs form.
func (s *Server) DeviceGetHandleByPciBusId(bus string) (nvmlstate.Device, nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs == 0 {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	d, err := s.device(bus)
	switch {
	case errors.Is(err, errUnknownGPU):
		return nil, nvml.ERROR_NOT_FOUND
	case err != nil:
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return d, nvml.SUCCESS
}

// DeviceGetHandleByUUID finds a GPU by the UUID GetUUID reports.
func (s *Server) DeviceGetHandleByUUID(id string) (*Device, nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs == 0 {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	for _, d := range s.devices {
		if d.uuid == id {
			return d, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// SetBusy marks a GPU as having clients (processes, monitoring daemons).
// A busy GPU leaves a MIG mode change pending and refuses ResetGPU, as the
// driver answers "In use by another client".
func (s *Server) SetBusy(bus string, busy bool) error {
	return s.setDevice(bus, func(d *Device) { d.busy = busy })
}

// SetVFsEnabled models sriov-manage -e/-d: with VFs enabled the GPU is in
// use, so MIG cannot be turned off and enabling it stays pending. It does
// not wipe GPU instances; call DriverRebind for the rebind that goes with
// it.
func (s *Server) SetVFsEnabled(bus string, enabled bool) error {
	return s.setDevice(bus, func(d *Device) { d.vfs = enabled })
}

// SetInstanceInUse marks a GPU instance as used (by a VM, a process, a
// compute instance), which makes Destroy answer nvml.ERROR_IN_USE.
func (s *Server) SetInstanceInUse(bus string, id int, inUse bool) error {
	return s.setInstance(bus, id, func(gi *GpuInstance) { gi.inUse = inUse })
}

// setDevice applies set to the GPU at bus under s.mu.
func (s *Server) setDevice(bus string, set func(*Device)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.device(bus)
	if err != nil {
		return err
	}
	set(d)
	return nil
}

// setInstance applies set to GPU instance id of the GPU at bus under s.mu.
func (s *Server) setInstance(bus string, id int, set func(*GpuInstance)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	gi, err := s.instance(bus, id)
	if err != nil {
		return err
	}
	set(gi)
	return nil
}

// instance finds GPU instance id of the GPU at bus. Caller holds s.mu.
func (s *Server) instance(bus string, id int) (*GpuInstance, error) {
	d, err := s.device(bus)
	if err != nil {
		return nil, err
	}
	gi, ok := d.gis[uint32(id)]
	if !ok || id < 0 {
		return nil, fmt.Errorf("no GPU instance %d on %s", id, d.addr.String())
	}
	return gi, nil
}

// ResetGPU models nvidia-smi -r: the pending MIG mode takes effect and every
// GPU instance is gone (the MIG user guide: instances do not survive a GPU
// reset). A GPU with clients or VFs cannot be reset.
func (s *Server) ResetGPU(bus string) nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.device(bus)
	if err != nil {
		return nvml.ERROR_NOT_FOUND
	}
	if d.busy || d.vfs {
		return nvml.ERROR_IN_USE
	}
	d.migCurrent = d.migPending
	d.wipe()
	d.hetero = false
	return nvml.SUCCESS
}

// DriverRebind models unbinding and rebinding the nvidia driver, as
// sriov-manage does: every GPU instance is destroyed, used or not, and old
// GpuInstance handles turn invalid; mixed-size mode goes off. MIG mode and
// its pending value stay.
func (s *Server) DriverRebind(bus string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.device(bus)
	if err != nil {
		return err
	}
	d.wipe()
	d.hetero = false
	return nil
}

// Instance describes one GPU instance for code that shows MIG-backed vGPU
// types (a fake kernel's sysfs, say).
type Instance struct {
	ID           int    // GPU instance ID, as nvidia-smi mig -lgi
	ProfileID    int    // profile ID, as nvidia-smi mig -lgip
	ProfileIndex int    // nvml.GPU_INSTANCE_PROFILE_* constant
	Profile      string // "1g.5gb"
	Start        int    // first memory slice
	Size         int    // memory slices
	MemorySizeMB uint64
	InUse        bool
}

// Instances lists a GPU's instances by ID; nil for an unknown bus.
func (s *Server) Instances(bus string) []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.device(bus)
	if err != nil {
		return nil
	}
	out := []Instance{}
	for _, gi := range d.sortedGIs() {
		out = append(out, Instance{
			ID:           int(gi.id),
			ProfileID:    int(gi.p.id),
			ProfileIndex: gi.p.index,
			Profile:      gi.p.name,
			Start:        int(gi.start),
			Size:         int(gi.p.size),
			MemorySizeMB: gi.p.memMB,
			InUse:        gi.inUse,
		})
	}
	return out
}
