package profile

import (
	"fmt"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// GPUs as the inventory reports them on hosts (or the fake kernel) with
// each catalog model, idle and with their vendor drivers loaded.

func gpu(addr string, vendor, device uint16, vname, dname, driver string, fb uint64, d ...inventory.Dialect) inventory.GPU {
	return inventory.GPU{
		Address: pci.MustParseAddress(addr), VendorID: vendor, DeviceID: device,
		VendorName: vname, DeviceName: dname, Class: 0x030000, NUMANode: 0, IOMMUGroup: 12,
		Driver: driver, FramebufferMB: fb, Dialects: d,
	}
}

func s7150GPU() inventory.GPU {
	g := gpu("0000:3d:00.0", 0x1002, 0x6929, "Advanced Micro Devices, Inc. [AMD/ATI]", "Tonga XT GL [FirePro S7150]", "gim", 0, inventory.DialectSRIOV, inventory.DialectPassthrough)
	g.SRIOV = &inventory.SRIOV{TotalVFs: 16, VFDeviceID: 0x692f}
	return g
}

func mi25GPU() inventory.GPU {
	g := gpu("0000:03:00.0", 0x1002, 0x6860, "Advanced Micro Devices, Inc. [AMD/ATI]", "Vega 10 [Radeon Instinct MI25]", "gim", 0, inventory.DialectSRIOV, inventory.DialectPassthrough)
	g.SRIOV = &inventory.SRIOV{TotalVFs: 16, VFDeviceID: 0x686c}
	return g
}

func b50GPU() inventory.GPU {
	g := gpu("0000:05:00.0", 0x8086, 0xe212, "Intel Corporation", "Battlemage G21 [Arc Pro B50]", "xe", 0, inventory.DialectSRIOV, inventory.DialectPassthrough)
	g.SRIOV = &inventory.SRIOV{TotalVFs: 16, VFDeviceID: 0xe212}
	return g
}

func b60GPU() inventory.GPU {
	g := gpu("0000:06:00.0", 0x8086, 0xe211, "Intel Corporation", "Battlemage G21 [Arc Pro B60]", "xe", 0, inventory.DialectSRIOV, inventory.DialectPassthrough)
	g.SRIOV = &inventory.SRIOV{TotalVFs: 16, VFDeviceID: 0xe211}
	return g
}

// nvType is an NVIDIA mdev type as the driver describes it.
func nvType(id int, name string, fbMB, maxInst int) inventory.MdevType {
	return inventory.MdevType{
		ID: fmt.Sprintf("nvidia-%d", id), Name: name, DeviceAPI: "vfio-pci",
		Description:        fmt.Sprintf("num_heads=4, frl_config=60, framebuffer=%dM, max_resolution=7680x4320, max_instance=%d", fbMB, maxInst),
		AvailableInstances: maxInst, MaxInstances: maxInst, FramebufferMB: uint64(fbMB),
	}
}

func t4GPU() inventory.GPU {
	g := gpu("0000:3b:00.0", 0x10de, 0x1eb8, "NVIDIA Corporation", "TU104GL [Tesla T4]", "nvidia", 16384, inventory.DialectMdev, inventory.DialectPassthrough)
	g.SRIOV = &inventory.SRIOV{TotalVFs: 16, VFDeviceID: 0x1eb8} // a T4 has SR-IOV but uses mdev
	g.MdevTypes = []inventory.MdevType{
		nvType(222, "GRID T4-1B", 1024, 16),
		nvType(230, "GRID T4-1Q", 1024, 16),
		nvType(231, "GRID T4-2Q", 2048, 8),
		nvType(232, "GRID T4-4Q", 4096, 4),
		nvType(233, "GRID T4-8Q", 8192, 2),
		nvType(234, "GRID T4-16Q", 16384, 1),
		nvType(319, "GRID T4-4C", 4096, 4),
	}
	return g
}

// a100GPU: VFs not enabled yet, so no types are visible: the catalog is
// trusted. a100GPUWithVFs shows them, one instance per VF.
func a100GPU() inventory.GPU {
	g := gpu("0000:41:00.0", 0x10de, 0x20f1, "NVIDIA Corporation", "GA100 [A100 PCIe 40GB]", "nvidia", 40960, inventory.DialectSRIOVMdev, inventory.DialectPassthrough)
	g.SRIOV = &inventory.SRIOV{TotalVFs: 20, VFDeviceID: 0x20f1}
	return g
}

func a100GPUWithVFs(n int) inventory.GPU {
	g := a100GPU()
	g.SRIOV.NumVFs = n
	for i := range n {
		vf := inventory.VF{Index: i, Address: pci.Address{Bus: 0x41, Device: 0, Function: uint8(4 + i%4)}, Driver: "nvidia", IOMMUGroup: 100 + i}
		for j, gb := range []int{4, 5, 8, 10, 20, 40} {
			t := nvType(468+j, fmt.Sprintf("NVIDIA A100-%dC", gb), gb*1024, 40/gb)
			t.AvailableInstances = 1
			vf.MdevTypes = append(vf.MdevTypes, t)
		}
		g.SRIOV.VFs = append(g.SRIOV.VFs, vf)
	}
	return g
}

func l40sTypes() []inventory.VGPUType {
	var ts []inventory.VGPUType
	id := 1145
	for _, n := range []string{"1B", "2B", "1Q", "2Q", "3Q", "4Q", "6Q", "8Q", "12Q", "16Q", "24Q", "48Q"} {
		ts = append(ts, inventory.VGPUType{ID: id, Name: "NVIDIA L40S-" + n})
		id++
	}
	return ts
}

// l40sGPU: VFs not enabled yet; l40sGPUWithVFs: enabled and idle.
func l40sGPU() inventory.GPU {
	g := gpu("0000:26:00.0", 0x10de, 0x26b9, "NVIDIA Corporation", "AD102GL [L40S]", "nvidia", 49152, inventory.DialectNVIDIAVF, inventory.DialectPassthrough)
	g.SRIOV = &inventory.SRIOV{TotalVFs: 32, VFDeviceID: 0x26b9}
	return g
}

// rtx6000AdaGPU: an RTX 6000 Ada before its VFs exist (the VF count is not
// public: any 16 or more serves).
func rtx6000AdaGPU() inventory.GPU {
	g := gpu("0000:27:00.0", 0x10de, 0x26b1, "NVIDIA Corporation", "AD102GL [RTX 6000 Ada Generation]", "nvidia", 0, inventory.DialectNVIDIAVF, inventory.DialectPassthrough)
	g.SRIOV = &inventory.SRIOV{TotalVFs: 32, VFDeviceID: 0x26b1}
	return g
}

func l40sGPUWithVFs(n int) inventory.GPU {
	g := l40sGPU()
	g.SRIOV.NumVFs = n
	for i := range n {
		g.SRIOV.VFs = append(g.SRIOV.VFs, inventory.VF{Index: i, Driver: "nvidia", IOMMUGroup: 200 + i,
			NVIDIA: &inventory.NVIDIAVF{Creatable: l40sTypes()}})
	}
	return g
}

// gvtgGPU: GVT-g descriptions carry no max_instance; available_instances
// is the room the aperture leaves.
func gvtgGPU() inventory.GPU {
	g := gpu("0000:00:02.0", 0x8086, 0x3e92, "Intel Corporation", "CoffeeLake-S GT2 [UHD Graphics 630]", "i915", 0, inventory.DialectMdev)
	// available_instances with a 1024 MB aperture: not the suffixes.
	for _, c := range [][2]int{{8, 7}, {4, 5}, {2, 2}, {1, 1}} {
		g.MdevTypes = append(g.MdevTypes, inventory.MdevType{
			ID: fmt.Sprintf("i915-GVTg_V5_%d", c[0]), Name: fmt.Sprintf("GVTg_V5_%d", c[0]), DeviceAPI: "vfio-pci",
			Description:        "low_gm_size: 64MB\nhigh_gm_size: 384MB\nfence: 4\nresolution: 1024x768\nweight: 2\n",
			AvailableInstances: c[1],
		})
	}
	return g
}

func rtx3090GPU() inventory.GPU {
	return gpu("0000:0a:00.0", 0x10de, 0x2204, "NVIDIA Corporation", "GA102 [GeForce RTX 3090]", "nouveau", 0, inventory.DialectPassthrough)
}
