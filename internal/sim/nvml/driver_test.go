package simnvml

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
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
		k := simkernel.NewFor(t, c.host)
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

// The H200 host file (examples/hosts/h200-guest.yaml: the real H200 in a
// VM, under the datacenter driver) has the measured H200's NVML, as a
// guest's driver answers it: PASSTHROUGH, no host vGPU mode and no vGPU
// types, MIG off with its profiles described, the memory total below
// 141 GB, at the kernel's address with the kernel's device id.
func TestForHostH200Guest(t *testing.T) {
	host, err := simkernel.ExampleHost("h200-guest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k := simkernel.NewFor(t, host)
	s, err := ForHost(k, host)
	if err != nil || s == nil {
		t.Fatalf("ForHost: %v, %v; want the H200's NVML", s, err)
	}
	if r := s.Init(); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	defer s.Shutdown()
	if n, r := s.DeviceGetCount(); r != nvml.SUCCESS || n != 1 {
		t.Fatalf("%d GPUs, %v; want the one H200", n, r)
	}
	d, _ := s.DeviceGetHandleByIndex(0)
	addr := host.GPUs[0].Address
	dev, err := sysfs.ReadUint(k, pci.DevicePath(addr)+"/device", 16)
	if err != nil {
		t.Fatal(err)
	}
	if info, r := d.GetPciInfo(); r != nvml.SUCCESS || info.PciDeviceId != uint32(dev)<<16|0x10de ||
		info.Bus != uint32(addr.Bus) || info.Device != uint32(addr.Device) {
		t.Errorf("PCI info %+v, %v; want 10de:%04x at %s", info, r, dev, addr)
	}
	if m, r := d.GetVirtualizationMode(); r != nvml.SUCCESS || m != nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH {
		t.Errorf("virtualization mode %d, %v; want PASSTHROUGH", m, r)
	}
	if _, r := d.GetHostVgpuMode(); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("host vGPU mode: %v, want NOT_SUPPORTED", r)
	}
	if _, r := d.GetSupportedVgpus(); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("supported vGPUs: %v, want NOT_SUPPORTED", r)
	}
	if mem, r := d.GetMemoryInfo(); r != nvml.SUCCESS || mem.Total != 143771<<20 {
		t.Errorf("memory total %d MiB, %v; want 143771", mem.Total>>20, r)
	}
	if cur, _, r := d.GetMigMode(); r != nvml.SUCCESS || cur != nvml.DEVICE_MIG_DISABLE {
		t.Errorf("MIG mode %d, %v; want off", cur, r)
	}
	if p, r := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE); r != nvml.SUCCESS || p.Id != 19 || p.MemorySizeMB != 16384 {
		t.Errorf("1g.18gb with MIG off: %+v, %v; want id 19 of 16384 MiB", p, r)
	}
}
