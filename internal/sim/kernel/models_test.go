package simkernel

import (
	"strings"
	"testing"
)

// Every model builds from its example file and shows its layout.
func TestModelLayouts(t *testing.T) {
	tests := []struct {
		model string
		files map[string]string // path -> content ("" only checks existence)
		links map[string]string // path -> last element of the target
		none  []string          // paths that must not exist
	}{
		{ModelS7150, map[string]string{
			devPath(s7150Addr, "device"): "0x6929\n", devPath(s7150Addr, "class"): "0x030000\n",
			devPath(s7150Addr, "sriov_vf_device"): "692f\n", devPath(s7150Addr, "sriov_totalvfs"): "16\n",
			devPath(s7150Addr, "sriov_numvfs"): "16\n", "/sys/module/gim/parameters/vf_num": "4294967295\n",
		}, map[string]string{devPath("0000:3d:00.1", "driver"): DrvPCIStub},
			[]string{devPath(s7150Addr, "mdev_supported_types"), devPath(s7150Addr, "driver"), "/sys/bus/pci/drivers/gim/" + s7150Addr}},
		{ModelMI25, map[string]string{
			devPath(mi25Addr, "device"): "0x6860\n", devPath(mi25Addr, "sriov_vf_device"): "686c\n",
		}, map[string]string{devPath(mi25Addr, "driver"): DrvSRIOVStandin}, nil},
		{ModelT4, map[string]string{
			devPath(t4Addr, "device"): "0x1eb8\n", devPath(t4Addr, "sriov_totalvfs"): "16\n", devPath(t4Addr, "sriov_offset"): "4\n",
			devPath(t4Addr, "mdev_supported_types/nvidia-234/name"): "GRID T4-16Q\n",
			devPath(t4Addr, "mdev_supported_types/nvidia-222/name"): "GRID T4-1B\n",
		}, map[string]string{devPath(t4Addr, "driver"): DrvNVIDIA, "/sys/class/mdev_bus/" + t4Addr: t4Addr}, nil},
		{ModelA100, map[string]string{
			devPath(a100Addr, "device"): "0x20f1\n", devPath(a100Addr, "sriov_vf_device"): "20f1\n",
			devPath(a100Addr, "sriov_offset"): "4\n", devPath(a100Addr, "sriov_totalvfs"): "16\n",
		}, map[string]string{devPath(a100Addr, "driver"): DrvNVIDIA}, []string{devPath(a100Addr, "mdev_supported_types")}},
		{ModelL40S, map[string]string{
			devPath(l40sAddr, "device"): "0x26b9\n", devPath(l40sAddr, "sriov_totalvfs"): "32\n", devPath(l40sAddr, "sriov_offset"): "4\n",
		}, map[string]string{devPath(l40sAddr, "driver"): DrvNVIDIA}, []string{devPath(l40sAddr, "nvidia"), "/sys/class/mdev_bus/" + l40sAddr}},
		{ModelGVTg, map[string]string{
			devPath(gvtgAddr, "device"): "0x3e92\n", devPath(gvtgAddr, "mdev_supported_types/i915-GVTg_V5_4/available_instances"): "5\n",
		}, map[string]string{devPath(gvtgAddr, "driver"): DrvI915, devPath(gvtgAddr, ""): gvtgAddr},
			[]string{devPath(gvtgAddr, "sriov_numvfs")}},
		{ModelPlain, map[string]string{devPath(plainAddr, "device"): "0x2204\n", devPath(plainAddr, "class"): "0x030000\n"},
			map[string]string{devPath(plainAddr, "driver"): DrvNouveau},
			[]string{devPath(plainAddr, "sriov_numvfs"), devPath(plainAddr, "mdev_supported_types")}},
		{ModelMbochs, map[string]string{"/sys/devices/virtual/mbochs/mbochs/mdev_supported_types/mbochs-large/available_instances": "4\n"},
			map[string]string{"/sys/class/mdev_bus/mbochs": "mbochs", "/sys/class/mbochs/mbochs": "mbochs"}, nil},
		{ModelMtty, map[string]string{"/sys/devices/virtual/mtty/mtty/mdev_supported_types/mtty-2/available_instances": "12\n"},
			map[string]string{"/sys/class/mdev_bus/mtty": "mtty"}, nil},
		{ModelQEMUNVMe, map[string]string{
			devPath(nvmeAddr, "device"): "0x0010\n", devPath(nvmeAddr, "class"): "0x010802\n", devPath(nvmeAddr, "sriov_totalvfs"): "4\n",
			devPath(nvmeAddr, "sriov_vf_device"): "10\n",
		}, map[string]string{devPath(nvmeAddr, "driver"): DrvNVMe}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			k := NewExample(t, tt.model+".yaml")
			for p, want := range tt.files {
				if got := read(t, k, p); want != "" && got != want {
					t.Errorf("%s = %q, want %q", p, got, want)
				}
			}
			for p, want := range tt.links {
				if got := linkBase(t, k, p); got != want {
					t.Errorf("%s -> %s, want %s", p, got, want)
				}
			}
			for _, p := range tt.none {
				wantExists(t, k, p, false)
			}
			// Every PCI device sits behind a host bridge and has its group.
			names, err := k.ReadDir("/sys/bus/pci/devices")
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range names {
				target, _ := k.Readlink("/sys/bus/pci/devices/" + e.Name())
				if !strings.HasPrefix(target, "../../../devices/pci0000:") {
					t.Errorf("%s -> %s", e.Name(), target)
				}
				g := groupOf(t, k, "/sys/bus/pci/devices/"+e.Name())
				wantExists(t, k, "/sys/kernel/iommu_groups/"+g+"/devices/"+e.Name(), true)
			}
		})
	}
}

func TestAllModelsOnOneHost(t *testing.T) {
	k := NewExample(t, "all.yaml")
	parents, err := k.ReadDir("/sys/class/mdev_bus")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range parents {
		got = append(got, p.Name())
	}
	if want := "0000:00:02.0,0000:3b:00.0,mbochs,mtty"; strings.Join(got, ",") != want {
		t.Fatalf("mdev parents %v, want %s", got, want)
	}
	drivers, _ := k.ReadDir("/sys/bus/pci/drivers")
	var names []string
	for _, d := range drivers {
		names = append(names, d.Name())
	}
	if want := "gim,i915,igb,igbvf,nouveau,nvidia,nvme,pci-pf-stub,pci-stub,pcieport,snd_hda_intel,sriov-standin,vfio-pci,xe"; strings.Join(names, ",") != want {
		t.Fatalf("drivers %v, want %s", names, want)
	}
	if got := read(t, k, devPath(a100VFAddr, "numa_node")); got != "1\n" {
		t.Errorf("a100-vf numa_node = %q", got)
	}
	if got := read(t, k, devPath(a100VFAddr, "local_cpulist")); got != "16-31\n" {
		t.Errorf("a100-vf local_cpulist = %q", got)
	}
}

func TestModelsList(t *testing.T) {
	for _, m := range Models() {
		if _, ok := lookupModel(m); !ok {
			t.Errorf("Models() lists %s but it has no definition", m)
		}
	}
	if _, ok := lookupModel("mi52"); ok {
		t.Error("unknown model found")
	}
}
