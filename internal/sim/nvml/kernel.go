package simnvml

import (
	"fmt"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
)

// A Server is the MIG side of a fake kernel (simkernel.Kernel.SetMIG): the
// kernel reads which instances exist to offer MIG-backed vGPU types, holds
// an instance while a vGPU runs on it, and reports sriov-manage's rebind
// and VF changes.
var _ simkernel.MIGHost = (*Server)(nil)

// MIGState reports whether MIG is on on the GPU at bus, and its instances.
func (s *Server) MIGState(bus string) (bool, []simkernel.MIGInstance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.device(bus)
	if err != nil || !d.migOn() {
		return false, nil
	}
	var out []simkernel.MIGInstance
	for _, gi := range d.sortedGIs() {
		out = append(out, simkernel.MIGInstance{ID: int(gi.id), Profile: gi.p.name})
	}
	return true, out
}

// HoldInstance marks instance id as carrying a vGPU: Destroy then answers
// ERROR_IN_USE, as the driver does for an instance a vGPU runs on.
func (s *Server) HoldInstance(bus string, id int, held bool) error {
	return s.setInstance(bus, id, func(gi *GpuInstance) { gi.vgpu = held })
}

// Sessions counts Init calls not yet shut down: each is an NVML client
// holding every GPU.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refs
}

// KernelModel is this fake's model of the fake kernel's NVIDIA model, ""
// for a GPU NVML does not show here.
func KernelModel(model string) string {
	switch model {
	case simkernel.ModelA100VF, simkernel.ModelA100:
		return ModelA100PCIe40GB
	case simkernel.ModelH100VF:
		return ModelH100PCIe80GB
	case simkernel.ModelH200:
		// The H200 in a VM whose NVML answers were measured: ForHost gives
		// it the guest's driver, as the host file says.
		return ModelH200SXM141GB
	case simkernel.ModelA30VF:
		return ModelA30PCIe24GB
	case simkernel.ModelL40S:
		return ModelL40S
	case simkernel.ModelT4:
		return ModelT4
	}
	return ""
}

// ForHost builds the NVML of host's GPUs that this fake models and joins
// it to k, host's kernel, as the nvidia driver and its library are one (of
// the host's driver kind, in its guest or not): nil when host has none of
// them.
func ForHost(k *simkernel.Kernel, host simkernel.Host) (*Server, error) {
	var gpus []GPU
	for _, g := range host.GPUs {
		if m := KernelModel(g.Model); m != "" {
			gpus = append(gpus, GPU{Model: m, BusID: g.Address.String()})
		}
	}
	if len(gpus) == 0 {
		return nil, nil
	}
	s, err := New(gpus...)
	if err != nil {
		return nil, fmt.Errorf("build the NVML of the simulated host: %w", err)
	}
	s.SetDriver(Driver{Datacenter: !host.NVIDIAVGPUHost(), Guest: host.Guest != ""})
	s.SetVGPUs(k.VGPUs)
	k.SetMIG(s)
	return s, nil
}
