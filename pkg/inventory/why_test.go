package inventory_test

import (
	"reflect"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/inventory"
)

// unavailable maps a GPU's unavailable dialects to their reasons.
func unavailable(g inventory.GPU) map[inventory.Dialect]string {
	out := map[inventory.Dialect]string{}
	for _, u := range g.Unavailable {
		out[u.Dialect] = u.Reason
	}
	return out
}

// The H200 passed through to a VM: nothing can be carved, and each
// dialect says why in the words of the host (no IOMMU, a guest, the
// datacenter driver).
func TestDiscoverH200Guest(t *testing.T) {
	k := simkernel.NewExample(t, "h200-guest.yaml")
	g := discoverOne(t, k, names(t))
	if len(g.Dialects) != 0 || g.IOMMUGroup != -1 || g.NUMANode != -1 || g.SRIOV != nil {
		t.Errorf("dialects %v, group %d, NUMA %d, SR-IOV %v; want none, -1, -1, none", g.Dialects, g.IOMMUGroup, g.NUMANode, g.SRIOV)
	}
	if g.NVIDIADriver == nil || *g.NVIDIADriver != (inventory.NVIDIADriver{Version: "580.159.04"}) {
		t.Errorf("driver %+v, want the datacenter driver 580.159.04", g.NVIDIADriver)
	}
	if !strings.Contains(g.Guest, "QEMU") {
		t.Errorf("guest %q, want QEMU's host bridge named", g.Guest)
	}
	why := unavailable(g)
	if why[inventory.DialectPassthrough] != inventory.ReasonNoIOMMU {
		t.Errorf("passthrough: %q", why[inventory.DialectPassthrough])
	}
	vf := why[inventory.DialectNVIDIAVF]
	for _, want := range []string{"no SR-IOV capability: this OS is a guest", "NVIDIA datacenter driver 580.159.04, not the vGPU host driver", "passthrough and bare-metal MIG only"} {
		if !strings.Contains(vf, want) {
			t.Errorf("nvidia-vf: %q lacks %q", vf, want)
		}
	}
	if len(why) != 2 {
		t.Errorf("unavailable %v, want passthrough and nvidia-vf", g.Unavailable)
	}
}

// Bare metal under the datacenter driver: the board's SR-IOV capability
// is there, the vGPU host driver is not.
func TestDiscoverDatacenterDriver(t *testing.T) {
	g := discoverOne(t, simkernel.NewExample(t, "l40s-datacenter.yaml"), nil)
	if !reflect.DeepEqual(g.Dialects, dialects()) || g.Guest != "" {
		t.Errorf("dialects %v, guest %q; want passthrough alone on bare metal", g.Dialects, g.Guest)
	}
	if r := unavailable(g)[inventory.DialectNVIDIAVF]; !strings.HasPrefix(r, "NVIDIA datacenter driver 580.159.04, not the vGPU host driver") {
		t.Errorf("nvidia-vf: %q", r)
	}
	// The vGPU host driver on the same board: nvidia-vf, nothing missing.
	g = discoverOne(t, simkernel.NewExample(t, "l40s.yaml"), nil)
	if !reflect.DeepEqual(g.Dialects, dialects(inventory.DialectNVIDIAVF)) || len(g.Unavailable) != 0 ||
		g.NVIDIADriver == nil || !g.NVIDIADriver.VGPUHost || g.NVIDIADriver.String() != "NVIDIA vGPU host driver 550.54.10" {
		t.Errorf("vGPU host: dialects %v, unavailable %v, driver %+v", g.Dialects, g.Unavailable, g.NVIDIADriver)
	}
}

// boot_vga tells the console's GPU; a function without it is not.
func TestDiscoverBootVGA(t *testing.T) {
	gpus, err := inventory.Discover(simkernel.NewExample(t, "desktop.yaml"), nil)
	if err != nil || len(gpus) != 2 {
		t.Fatalf("%d GPUs, %v", len(gpus), err)
	}
	if !gpus[0].BootVGA || gpus[1].BootVGA {
		t.Errorf("boot VGA: %s %v, %s %v; want the iGPU alone", gpus[0].Address, gpus[0].BootVGA, gpus[1].Address, gpus[1].BootVGA)
	}
}

// WhyNot's reasons, case by case, for GPUs built by hand.
func TestWhyNot(t *testing.T) {
	vgpuHost := &inventory.NVIDIADriver{Version: "550.54.10", VGPUHost: true}
	datacenter := &inventory.NVIDIADriver{Version: "580.159.04"}
	sriov := &inventory.SRIOV{TotalVFs: 16}
	for _, c := range []struct {
		name string
		g    inventory.GPU
		d    inventory.Dialect
		want []string // substrings, none for ""
	}{
		{"passthrough with a group", inventory.GPU{IOMMUGroup: 3}, inventory.DialectPassthrough, nil},
		{"passthrough without", inventory.GPU{IOMMUGroup: -1}, inventory.DialectPassthrough, []string{"intel_iommu=on or amd_iommu=on", "in a VM, a vIOMMU"}},
		{"AMD SR-IOV without an IOMMU", inventory.GPU{VendorID: 0x1002, IOMMUGroup: -1, SRIOV: sriov}, inventory.DialectSRIOV, []string{"no IOMMU group"}},
		{"bare-metal board without SR-IOV", inventory.GPU{VendorID: 0x10de, NVIDIADriver: vgpuHost}, inventory.DialectNVIDIAVF, []string{"SR-IOV off in firmware"}},
		{"guest", inventory.GPU{VendorID: 0x10de, NVIDIADriver: vgpuHost, Guest: "NVML says so"}, inventory.DialectNVIDIAVF, []string{"this OS is a guest (NVML says so)"}},
		{"vGPU host", inventory.GPU{VendorID: 0x10de, NVIDIADriver: vgpuHost, SRIOV: sriov, IOMMUGroup: 4}, inventory.DialectNVIDIAVF, nil},
		{"vGPU host without an IOMMU", inventory.GPU{VendorID: 0x10de, NVIDIADriver: vgpuHost, SRIOV: sriov, IOMMUGroup: -1}, inventory.DialectSRIOVMdev, []string{"no IOMMU group"}},
		{"datacenter", inventory.GPU{VendorID: 0x10de, NVIDIADriver: datacenter, SRIOV: sriov}, inventory.DialectNVIDIAVF, []string{"NVIDIA datacenter driver 580.159.04, not the vGPU host driver"}},
		{"no nvidia module", inventory.GPU{VendorID: 0x10de, SRIOV: sriov}, inventory.DialectNVIDIAVF, []string{"the nvidia module is not loaded"}},
		{"T4 mdev under the datacenter driver", inventory.GPU{VendorID: 0x10de, NVIDIADriver: datacenter}, inventory.DialectMdev, []string{"not the vGPU host driver"}},
		{"GVT-g mdev", inventory.GPU{VendorID: 0x8086}, inventory.DialectMdev, nil},
	} {
		got := inventory.WhyNot(c.g, c.d)
		if len(c.want) == 0 && got != "" {
			t.Errorf("%s: %q, want nothing in the way", c.name, got)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", c.name, got, w)
			}
		}
	}
}
