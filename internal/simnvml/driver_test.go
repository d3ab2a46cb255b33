package simnvml

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-project/vgpu/internal/simkernel"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// The vGPU host driver answers HOST_VGPU, SR-IOV or not by the board, and
// lists vGPU types; the datacenter driver answers NONE on bare metal and
// PASSTHROUGH in a guest, with no host vGPU mode, vGPU types, scheduler or
// mixed-size mode (as the real H200 guest did), while MIG still answers.
func TestDriverKinds(t *testing.T) {
	for _, c := range []struct {
		name     string
		model    string
		driver   Driver
		mode     nvml.GpuVirtualizationMode
		hostMode nvml.HostVgpuMode
		hostRet  nvml.Return
		vgpuRet  nvml.Return
	}{
		{"L40S, vGPU host", ModelL40S, Driver{}, nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU, nvml.HOST_VGPU_MODE_SRIOV, nvml.SUCCESS, nvml.SUCCESS},
		{"T4, vGPU host", ModelT4, Driver{}, nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU, nvml.HOST_VGPU_MODE_NON_SRIOV, nvml.SUCCESS, nvml.ERROR_NOT_SUPPORTED},
		{"L40S, datacenter", ModelL40S, Driver{Datacenter: true}, nvml.GPU_VIRTUALIZATION_MODE_NONE, 0, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED},
		{"H100 in a guest", ModelH100PCIe80GB, Driver{Guest: true}, nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH, 0, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED},
	} {
		s, d := newGPU(t, c.model)
		s.SetDriver(c.driver)
		if m, r := d.GetVirtualizationMode(); r != nvml.SUCCESS || m != c.mode {
			t.Errorf("%s: virtualization mode %d, %v; want %d", c.name, m, r, c.mode)
		}
		if m, r := d.GetHostVgpuMode(); r != c.hostRet || r == nvml.SUCCESS && m != c.hostMode {
			t.Errorf("%s: host vGPU mode %d, %v; want %d, %v", c.name, m, r, c.hostMode, c.hostRet)
		}
		if _, r := d.GetSupportedVgpus(); r != c.vgpuRet {
			t.Errorf("%s: supported vGPUs: %v, want %v", c.name, r, c.vgpuRet)
		}
		if c.driver.Datacenter || c.driver.Guest {
			if _, r := d.GetVgpuSchedulerState(); r != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("%s: scheduler: %v", c.name, r)
			}
			if r := d.SetVgpuHeterogeneousMode(nvml.VgpuHeterogeneousMode{Mode: uint32(nvml.FEATURE_ENABLED)}); r != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("%s: mixed-size mode: %v", c.name, r)
			}
		}
		if c.model == ModelH100PCIe80GB {
			if act, r := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); r != nvml.SUCCESS || act != nvml.SUCCESS {
				t.Errorf("%s: MIG: %v, %v", c.name, r, act)
			}
		}
	}
}

// ForHost takes the host file's driver kind and guest.
func TestForHostDriver(t *testing.T) {
	for _, c := range []struct {
		host simkernel.Host
		mode nvml.GpuVirtualizationMode
	}{
		{simkernel.Host{GPUs: []simkernel.HostGPU{{Model: simkernel.ModelL40S, Address: pci.MustParseAddress(bus)}}}, nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU},
		{simkernel.Host{NVIDIADriverKind: simkernel.NVIDIADatacenter, GPUs: []simkernel.HostGPU{{Model: simkernel.ModelL40S, Address: pci.MustParseAddress(bus)}}}, nvml.GPU_VIRTUALIZATION_MODE_NONE},
		{simkernel.Host{Guest: simkernel.GuestQEMU, GPUs: []simkernel.HostGPU{{Model: simkernel.ModelL40S, Address: pci.MustParseAddress(bus)}}}, nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH},
	} {
		k, err := simkernel.New(c.host)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ForHost(k, c.host)
		if err != nil {
			t.Fatal(err)
		}
		s.Init()
		d, _ := s.DeviceGetHandleByIndex(0)
		if m, r := d.GetVirtualizationMode(); r != nvml.SUCCESS || m != c.mode {
			t.Errorf("%+v: mode %d, %v; want %d", c.host, m, r, c.mode)
		}
	}
}
