package profile

import (
	"fmt"
	"slices"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// GPUs as the inventory reports them on hosts (or the fake kernel) with
// each catalog model, idle and with their vendor drivers loaded.

func gpu(addr string, vendor, device uint16, vname, dname, driver string, fb uint64, d ...inventory.Dialect) inventory.GPU {
	g := inventory.GPU{
		Address: pci.MustParseAddress(addr), VendorID: vendor, DeviceID: device,
		VendorName: vname, DeviceName: dname, Class: 0x030000, NUMANode: 0, IOMMUGroup: 12,
		Driver: driver, FramebufferMB: fb, Dialects: d,
	}
	if vendor == NVIDIAVendor {
		g.NVIDIADriver = &inventory.NVIDIADriver{Version: "550.54.10", VGPUHost: true} // the vGPU host driver
	}
	return g
}

// withSRIOV is g with SR-IOV: total VFs of device id vf possible, none
// enabled.
func withSRIOV(g inventory.GPU, total int, vf uint16) inventory.GPU {
	g.SRIOV = &inventory.SRIOV{TotalVFs: total, VFDeviceID: vf}
	return g
}

func s7150GPU() inventory.GPU {
	return withSRIOV(gpu("0000:3d:00.0", 0x1002, 0x6929, "Advanced Micro Devices, Inc. [AMD/ATI]", "Tonga XT GL [FirePro S7150]", "gim", 0, inventory.DialectSRIOV, inventory.DialectPassthrough), 16, 0x692f)
}

func mi25GPU() inventory.GPU {
	return withSRIOV(gpu("0000:03:00.0", 0x1002, 0x6860, "Advanced Micro Devices, Inc. [AMD/ATI]", "Vega 10 [Radeon Instinct MI25]", "gim", 0, inventory.DialectSRIOV, inventory.DialectPassthrough), 16, 0x686c)
}

func newGIMGPU(device, vf uint16, name string, total int) func() inventory.GPU {
	return func() inventory.GPU {
		g := withSRIOV(gpu("0000:05:00.0", 0x1002, device, "Advanced Micro Devices, Inc. [AMD/ATI]", name, "gim", 0, inventory.DialectSRIOV, inventory.DialectPassthrough), total, vf)
		g.SRIOV.NumVFs = 1
		return g
	}
}

var (
	mi300xGPU = newGIMGPU(0x74a1, 0x74b5, "Aqua Vanjaram [Instinct MI300X]", 8)
	mi350xGPU = newGIMGPU(0x75a0, 0x75b0, "Instinct MI350X", 8)
	v710GPU   = newGIMGPU(0x7460, 0x7461, "Navi 32 [Radeon PRO V710]", 12)
)

func b50GPU() inventory.GPU {
	return withSRIOV(gpu("0000:05:00.0", 0x8086, 0xe212, "Intel Corporation", "Battlemage G21 [Arc Pro B50]", "xe", 0, inventory.DialectSRIOV, inventory.DialectPassthrough), 16, 0xe212)
}

func b60GPU() inventory.GPU {
	return withSRIOV(gpu("0000:06:00.0", 0x8086, 0xe211, "Intel Corporation", "Battlemage G21 [Arc Pro B60]", "xe", 0, inventory.DialectSRIOV, inventory.DialectPassthrough), 16, 0xe211)
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
	// A T4 has SR-IOV but uses mdev.
	g := withSRIOV(gpu("0000:3b:00.0", 0x10de, 0x1eb8, "NVIDIA Corporation", "TU104GL [Tesla T4]", "nvidia", 16384, inventory.DialectMdev, inventory.DialectPassthrough), 16, 0x1eb8)
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
	return withSRIOV(gpu("0000:41:00.0", 0x10de, 0x20f1, "NVIDIA Corporation", "GA100 [A100 PCIe 40GB]", "nvidia", 40960, inventory.DialectSRIOVMdev, inventory.DialectPassthrough), 20, 0x20f1)
}

// a100VFGPU is the A100 on a vGPU 17+ host, as inventory shows it once
// its VFs show per-VF types.
func a100VFGPU() inventory.GPU {
	g := a100GPU()
	g.Dialects = []inventory.Dialect{inventory.DialectNVIDIAVF, inventory.DialectPassthrough}
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
	return withSRIOV(gpu("0000:26:00.0", 0x10de, 0x26b9, "NVIDIA Corporation", "AD102GL [L40S]", "nvidia", 49152, inventory.DialectNVIDIAVF, inventory.DialectPassthrough), 32, 0x26b9)
}

// rtx6000AdaGPU: an RTX 6000 Ada before its VFs exist (the VF count is not
// public: any 16 or more serves).
func rtx6000AdaGPU() inventory.GPU {
	return withSRIOV(gpu("0000:27:00.0", 0x10de, 0x26b1, "NVIDIA Corporation", "AD102GL [RTX 6000 Ada Generation]", "nvidia", 0, inventory.DialectNVIDIAVF, inventory.DialectPassthrough), 32, 0x26b1)
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

// h200GPU is an H200 SXM as a guest sees it passed through: no SR-IOV.
func h200GPU() inventory.GPU {
	return gpu("0000:00:06.0", 0x10de, 0x2335, "NVIDIA Corporation", "GH100 [H200 SXM 141GB]", "nvidia", 0, inventory.DialectPassthrough)
}

func rtx3090GPU() inventory.GPU {
	return gpu("0000:0a:00.0", 0x10de, 0x2204, "NVIDIA Corporation", "GA102 [GeForce RTX 3090]", "nouveau", 0, inventory.DialectPassthrough)
}

// vfBoard is a vGPU 17+ GPU of the catalog whose VFs are enabled and idle,
// each listing types as the driver prints them (id, name).
type vfBoard struct {
	addr, pciName string
	deviceID      uint16
	fbMB          uint64
	types         []inventory.VGPUType
}

// fixtureTypes numbers names from base. NVIDIA publishes no ids for these
// boards: the numbers are the fixture's own, which is the point of a
// catalog that gives the types by name.
func fixtureTypes(base int, names ...string) []inventory.VGPUType {
	ts := make([]inventory.VGPUType, len(names))
	for i, n := range names {
		ts[i] = inventory.VGPUType{ID: base + i, Name: n}
	}
	return ts
}

func (b vfBoard) gpu() inventory.GPU {
	g := gpu(b.addr, 0x10de, b.deviceID, "NVIDIA Corporation", b.pciName, "nvidia", b.fbMB, inventory.DialectNVIDIAVF, inventory.DialectPassthrough)
	g.SRIOV = &inventory.SRIOV{TotalVFs: 16, NumVFs: 16, VFDeviceID: b.deviceID}
	for i := range 16 {
		g.SRIOV.VFs = append(g.SRIOV.VFs, inventory.VF{Index: i, Driver: "nvidia", IOMMUGroup: 300 + i,
			NVIDIA: &inventory.NVIDIAVF{Creatable: slices.Clone(b.types)}})
	}
	return g
}

// vfBoards are the catalog's vGPU 17+ boards other than the L40S and the
// RTX 6000 Ada. The A10's ids are those of OpenNebula's listing and the
// H200X-141C's NVIDIA's README example; the RTX PRO 6000 prints its board
// before the type, as nvidia-smi showed it on a host.
func vfBoards() map[string]vfBoard {
	return map[string]vfBoard{
		"a2": {"0000:17:00.0", "GA107GL [A2 / A16]", 0x25b6, 16384,
			fixtureTypes(9100, "NVIDIA A2-1Q", "NVIDIA A2-2Q", "NVIDIA A2-4Q", "NVIDIA A2-8Q", "NVIDIA A2-16Q", "NVIDIA A2-4C")},
		"a16": {"0000:18:00.0", "GA107GL [A2 / A16]", 0x25b6, 16384,
			fixtureTypes(9200, "NVIDIA A16-1Q", "NVIDIA A16-2Q", "NVIDIA A16-4Q", "NVIDIA A16-8Q", "NVIDIA A16-16Q", "NVIDIA A16-4C")},
		"a10": {"0000:41:00.0", "GA102GL [A10]", 0x2236, 24576,
			fixtureTypes(588, "NVIDIA A10-1B", "NVIDIA A10-2B", "NVIDIA A10-1Q", "NVIDIA A10-2Q", "NVIDIA A10-3Q", "NVIDIA A10-4Q",
				"NVIDIA A10-6Q", "NVIDIA A10-8Q", "NVIDIA A10-12Q", "NVIDIA A10-24Q")},
		"a40": {"0000:19:00.0", "GA102GL [A40]", 0x2235, 49152,
			fixtureTypes(9300, "NVIDIA A40-3Q", "NVIDIA A40-6Q", "NVIDIA A40-12Q", "NVIDIA A40-16Q", "NVIDIA A40-24Q", "NVIDIA A40-48Q")},
		"l4": {"0000:1a:00.0", "AD104GL [L4]", 0x27b8, 24576,
			fixtureTypes(9400, "NVIDIA L4-3Q", "NVIDIA L4-6Q", "NVIDIA L4-8Q", "NVIDIA L4-12Q", "NVIDIA L4-24Q")},
		"l40": {"0000:1b:00.0", "AD102GL [L40]", 0x26b5, 49152,
			fixtureTypes(9500, "NVIDIA L40-3Q", "NVIDIA L40-6Q", "NVIDIA L40-12Q", "NVIDIA L40-16Q", "NVIDIA L40-24Q", "NVIDIA L40-48Q")},
		"h100": {"0000:1c:00.0", "GH100 [H100 PCIe]", 0x2331, 81920,
			fixtureTypes(9600, "NVIDIA H100-5C", "NVIDIA H100-10C", "NVIDIA H100-16C", "NVIDIA H100-20C", "NVIDIA H100-40C", "NVIDIA H100-80C")},
		"h200": {"0000:1d:00.0", "GH100 [H200 NVL]", 0x233b, 144384,
			fixtureTypes(9700, "NVIDIA H200-8C", "NVIDIA H200-17C", "NVIDIA H200-35C", "NVIDIA H200-70C", "NVIDIA H200-141C")},
		"h200x": {"0000:1e:00.0", "GH100 [H200 SXM 141GB]", 0x2335, 144384,
			append(fixtureTypes(9800, "NVIDIA H200X-8C", "NVIDIA H200X-17C", "NVIDIA H200X-35C", "NVIDIA H200X-70C"),
				inventory.VGPUType{ID: 1428, Name: "NVIDIA H200X-141C"})},
		// Boards with MIG-backed profiles only: their time-sliced types.
		"h100xm": {"0000:21:00.0", "GH100[H100 SXM5 80GB]", 0x2330, 81920,
			fixtureTypes(9960, "NVIDIA H100XM-40C", "NVIDIA H100XM-80C")},
		"a30": {"0000:22:00.0", "GA100GL [A30 PCIe]", 0x20b7, 24576,
			fixtureTypes(9970, "NVIDIA A30-12C", "NVIDIA A30-24C")},
		"b200x": {"0000:1f:00.0", "GB100 [B200]", 0x2901, 184320,
			fixtureTypes(9900, "NVIDIA B200X-180C")},
		"rtxpro6000": {"0000:20:00.0", "GB202GL [RTX PRO 6000 Blackwell Server Edition]", 0x2bb5, 98304,
			fixtureTypes(9950, "NVIDIA RTX Pro 6000 Blackwell DC-6Q", "NVIDIA RTX Pro 6000 Blackwell DC-12Q", "NVIDIA RTX Pro 6000 Blackwell DC-24Q",
				"NVIDIA RTX Pro 6000 Blackwell DC-48Q", "NVIDIA RTX Pro 6000 Blackwell DC-96Q")},
	}
}
