package simkernel

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// The H200 in a VM, as docs/real-hosts.md records it: no IOMMU group anywhere, no
// SR-IOV files, NUMA -1, the datacenter driver 580.159.04 without the vGPU
// Manager's module, QEMU's host bridge at 00:00.0; vfio-pci takes nothing.
func TestH200Guest(t *testing.T) {
	k := NewExample(t, "h200-guest.yaml")
	const gpu = "0000:00:06.0"
	for attr, want := range map[string]string{
		"class": "0x030200\n", "vendor": "0x10de\n", "device": "0x2335\n", "subsystem_device": "0x18bf\n", "numa_node": "-1\n",
	} {
		if got := read(t, k, devPath(gpu, attr)); got != want {
			t.Errorf("%s: %q, want %q", attr, got, want)
		}
	}
	if d := driverOf(k, gpu); d != DrvNVIDIA {
		t.Errorf("driver %q", d)
	}
	for _, attr := range []string{"iommu_group", "sriov_totalvfs", "sriov_numvfs", "physfn", "mdev_supported_types", "boot_vga"} {
		wantExists(t, k, devPath(gpu, attr), false)
	}
	if es, err := k.ReadDir(sysfs.IOMMUGroups); err != nil || len(es) != 0 {
		t.Errorf("%s: %d entries, %v; want none", sysfs.IOMMUGroups, len(es), err)
	}
	if got := read(t, k, "/sys/module/nvidia/version"); got != "580.159.04\n" {
		t.Errorf("nvidia version %q", got)
	}
	wantExists(t, k, "/sys/module/"+ModNVIDIAVGPUVFIO, false)
	if got := read(t, k, "/proc/sys/kernel/osrelease"); got != "6.18.0\n" {
		t.Errorf("osrelease %q", got)
	}
	for attr, want := range map[string]string{"vendor": "0x8086\n", "device": "0x1237\n", "subsystem_vendor": "0x1af4\n", "subsystem_device": "0x1100\n", "class": "0x060000\n"} {
		if got := read(t, k, devPath("0000:00:00.0", attr)); got != want {
			t.Errorf("host bridge %s: %q, want %q", attr, got, want)
		}
	}
	if k.hasTool(sysfs.ToolSriovManage) {
		t.Error("sriov-manage installed with the datacenter driver")
	}
	// vfio-pci registers no device without an IOMMU group.
	write(t, k, devPath(gpu, "driver/unbind"), gpu)
	write(t, k, devPath(gpu, "driver_override"), DrvVFIOPCI)
	writeErr(t, k, "/sys/bus/pci/drivers/vfio-pci/bind", gpu, syscall.EINVAL)
	wantExists(t, k, devPath(gpu, "driver"), false)
}

// Under the datacenter driver an SR-IOV board shows its capability but no
// vGPU: the nvidia module ignores VFs (nv-pci.c), a T4 registers no mdev
// types, and there is no sriov-manage.
func TestNVIDIADatacenterDriver(t *testing.T) {
	k := NewExample(t, "l40s-datacenter.yaml")
	wantExists(t, k, "/sys/module/"+ModNVIDIAVGPUVFIO, false)
	if got := read(t, k, devPath(l40sAddr, "sriov_totalvfs")); got != "32\n" {
		t.Errorf("sriov_totalvfs %q", got)
	}
	if _, err := k.RunTool(context.Background(), sysfs.ToolSriovManage, "-e", l40sAddr); err == nil {
		t.Error("sriov-manage ran on a host without the vGPU host driver")
	}
	// VFs made by hand (pci-pf-stub's sriov_configure): nvidia refuses
	// them, and pci-pf-stub, whose new id they share, takes them.
	write(t, k, devPath(l40sAddr, "driver/unbind"), l40sAddr)
	write(t, k, "/sys/bus/pci/drivers/pci-pf-stub/new_id", "10de 26b9")
	if d := driverOf(k, l40sAddr); d != DrvPFStub {
		t.Fatalf("PF on %q after new_id", d)
	}
	write(t, k, devPath(l40sAddr, "sriov_numvfs"), "2")
	vf := linkBase(t, k, devPath(l40sAddr, "virtfn0"))
	refused := false
	for _, p := range k.ProbeLog() {
		refused = refused || p.Device == vf && p.Driver == DrvNVIDIA && p.Errno == syscall.EPERM
	}
	if !refused || driverOf(k, vf) == DrvNVIDIA {
		t.Errorf("VF %s on %q, nvidia refused it: %v; the datacenter driver ignores VFs", vf, driverOf(k, vf), refused)
	}
	wantExists(t, k, devPath(vf, "nvidia"), false)

	t4 := parseKernel(t, "t4.yaml", []byte("version: v1\nnvidiaDriverKind: datacenter\ngpus:\n  - model: t4\n    address: 0000:3b:00.0\n"))
	wantExists(t, t4, devPath(t4Addr, "mdev_supported_types"), false)
	wantExists(t, t4, "/sys/bus/mdev/drivers/"+MdevDrvNVIDIA, false)
	if got := read(t, t4, "/sys/module/nvidia/version"); got != NVIDIADriverDatacenter+"\n" {
		t.Errorf("datacenter default version %q", got)
	}
	// The vGPU host driver's module is there by default.
	wantExists(t, NewExample(t, "t4.yaml"), "/sys/module/"+ModNVIDIAVGPUVFIO+"/refcnt", true)
}

// boot_vga is on VGA-class functions only, 1 on the firmware's display.
func TestBootVGA(t *testing.T) {
	k := NewExample(t, "desktop.yaml")
	for dev, want := range map[string]string{gvtgAddr: "1\n", "0000:01:00.0": "0\n"} {
		if got := read(t, k, devPath(dev, "boot_vga")); got != want {
			t.Errorf("%s boot_vga %q, want %q", dev, got, want)
		}
	}
	wantExists(t, k, devPath("0000:01:00.1", "boot_vga"), false) // the audio function
	if g, a := linkBase(t, k, devPath("0000:01:00.0", "iommu_group")), linkBase(t, k, devPath("0000:01:00.1", "iommu_group")); g != a {
		t.Errorf("the RTX 4090's functions in groups %s and %s", g, a)
	}
}

func TestHostValidationRealHosts(t *testing.T) {
	gpu := func(model, addr string) HostGPU { return HostGPU{Model: model, Address: pci.MustParseAddress(addr)} }
	for _, c := range []struct {
		h    Host
		want string
	}{
		{Host{GPUs: []HostGPU{{Model: ModelT4, Address: pci.MustParseAddress(t4Addr), BootVGA: true}}}, "gpus[0].bootVGA: model t4 is no VGA-class device"},
		{Host{GPUs: []HostGPU{{Model: ModelGVTg, BootVGA: true}, {Model: ModelRTX4090, Address: pci.MustParseAddress("0000:01:00.0"), BootVGA: true}}}, "gpus[1].bootVGA: gpus[0] is the boot display already"},
		{Host{NVIDIADriverKind: "grid", GPUs: []HostGPU{gpu(ModelT4, t4Addr)}}, `nvidiaDriverKind: unknown "grid"`},
		{Host{NVIDIADriverKind: NVIDIADatacenter, GPUs: []HostGPU{gpu(ModelPlain, plainAddr)}}, "nvidiaDriverKind: no GPU of the host loads the nvidia driver"},
		{Host{Guest: "xen", GPUs: []HostGPU{gpu(ModelPlain, plainAddr)}}, `guest: unknown hypervisor "xen"`},
		{Host{NoIOMMU: true, GPUs: []HostGPU{{Model: ModelPlain, Address: pci.MustParseAddress(plainAddr), SharedGroup: true}}}, "gpus[0].sharedGroup: the host has noIOMMU"},
	} {
		if err := c.h.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate = %v, want %q", err, c.want)
		}
	}
}
