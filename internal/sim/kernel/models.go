package simkernel

import (
	"fmt"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

// pciIDs are the identity attributes of a PCI function.
type pciIDs struct {
	vendor, device       uint16
	subVendor, subDevice uint16
	class                uint32
	revision             uint8
}

// modelDef describes one device model: what the tree shows for it and how
// its drivers react. Models are built fresh by modelTable; nothing is shared
// between kernels.
type modelDef struct {
	name    string
	summary string // one line for docs and errors
	ids     pciIDs
	driver  string   // default driver at boot
	modules []string // drivers loaded on a host that has this model
	// altDrivers a host file may name for the model besides modules,
	// loaded only then (amdgpu on a GIM GPU: GIM hosts blacklist it).
	altDrivers []string
	// virtual models (mbochs, mtty) are mdev parents under
	// /sys/devices/virtual/<class>/<class> and take no PCI address.
	virtual     bool
	defaultAddr string // used when the host file omits the address
	resets      []string
	vramMB      int // what amdgpu reports in mem_info_vram_total; xe's VRAM
	sriov       *sriovDef
	pfMdev      *mdevDef   // types on the PF (T4, GVT-g) or the virtual parent
	vfMdev      *mdevDef   // types on each VF, one pool per PF (A100)
	vfNV        *nvDef     // NVIDIA per-VF vGPU types (L40S)
	newGIM      *newGIMDef // new AMD GIM drives the PF (newgim.go)
	// functions are the card's other PCI functions (HD audio, USB-C), in
	// the PF's IOMMU group as on real boards: no ACS between functions.
	functions []funcDef
}

// funcDef is one more function of a multi-function card.
type funcDef struct {
	fn     uint8
	ids    pciIDs
	driver string
}

type sriovDef struct {
	total, offset, stride int
	vfDevice              uint16
	// driverMax is what the PF's own driver limits sriov_totalvfs to while
	// it is bound (pci_sriov_set_totalvfs; igb: 7 of the 82576's 8); 0 none.
	driverMax int
}

type homogeneity uint8

const (
	mixAny    homogeneity = iota
	mixByType             // one type per GPU (NVIDIA time-sliced vGPU on T4/A100)
	mixBySize             // one framebuffer size per GPU (NVIDIA vGPU 17+)
)

type mdevDef struct {
	driver    string // the mdev bus driver instances bind to
	prefix    string // dev_driver_string(parent): type dirs are "<prefix>-<sysfsName>"
	capacity  []int  // the shared pool, per resource
	mix       homogeneity
	perParent int // max instances per parent; 0 no limit
	types     []mdevTypeDef
	// vendor is the driver's attribute group on each instance (dir, attrs).
	vendorDir   string
	vendorAttrs func(uuid string, t *mdevTypeDef) map[string]string
	// vgpuParams: the group has NVIDIA's writable vgpu_params.
	vgpuParams bool
}

type mdevTypeDef struct {
	sysfsName   string
	prettyName  string // "" : the name attribute falls back to sysfsName (kernel >= 6.1)
	description string // "" : no description attribute (the driver has none)
	cost        []int  // per pool resource
	sizeMB      int
}

type nvDef struct {
	capacityMB int
	types      []nvTypeDef
	mig        []nvMIGTypeDef // MIG-backed types (A100, H100), with MIG on only
}

// nvMIGTypeDef is a MIG-backed vGPU type: it runs on one GPU instance of
// profile gi.
type nvMIGTypeDef struct {
	id   int
	name string
	gi   string // GPU instance profile, "1g.5gb"
}

type nvTypeDef struct {
	id     int
	name   string
	sizeMB int
}

// Model names, as the host file spells them.
const (
	ModelS7150    = "s7150"
	ModelMI25     = "mi25"
	ModelT4       = "t4"
	ModelA100     = "a100"
	ModelL40S     = "l40s"
	ModelA100VF   = "a100-vf"
	ModelH100VF   = "h100-vf"
	ModelA30VF    = "a30-vf"
	ModelGVTg     = "gvtg"
	ModelPlain    = "plain"
	ModelMbochs   = "mbochs"
	ModelMtty     = "mtty"
	ModelQEMUNVMe = "qemu-nvme"
	ModelIGB      = "igb"
	ModelArcB50   = "arc-pro-b50"
	ModelArcB60   = "arc-pro-b60"
	ModelMI300X   = "mi300x"
	ModelMI350X   = "mi350x"
	ModelV710     = "v710"
	ModelH200     = "h200-guest"
	ModelRTX4090  = "rtx4090"
)

// ModNVIDIAVGPUVFIO is the vGPU Manager's module, which only NVIDIA's vGPU
// host driver has.
const ModNVIDIAVGPUVFIO = "nvidia_vgpu_vfio"

// GuestQEMU is Host.Guest for a QEMU (KVM) guest.
const GuestQEMU = "qemu"

// qemuHostBridge is where QEMU's i440FX puts its host bridge: 0000:00:00.0.
func qemuHostBridge() pci.Address { return pci.Address{} }

// qemuHostBridgeIDs: Intel 440FX (8086:1237, rev 02) with the subsystem
// QEMU gives what it emulates, 1af4:1100 (QEMU docs/specs/pci-ids: "the
// 1100 device ID is used as PCI Subsystem ID for existing hardware devices
// emulated by qemu"), class host bridge.
func qemuHostBridgeIDs() pciIDs {
	return pciIDs{vendor: 0x8086, device: 0x1237, subVendor: 0x1af4, subDevice: 0x1100, class: 0x060000, revision: 0x02}
}

// pciClassVGA is the class (base and subclass) whose functions show
// boot_vga (drivers/pci/pci-sysfs.c: pci_is_vga).
const pciClassVGA = 0x0300

// Driver names the fake kernel knows.
const (
	DrvVFIOPCI  = "vfio-pci"
	DrvPCIStub  = "pci-stub"
	DrvPCIePort = "pcieport"
	DrvGIM      = "gim"
	// DrvSRIOVStandin drives the mi25 model: a PF driver with a standard
	// sriov_configure. No public KVM driver enables SR-IOV on the MI25
	// (old GIM's gim_pci_tbl holds only the S7150, new GIM starts at the
	// MI300X), so the model stands for generic SR-IOV GPUs (Intel xe).
	DrvSRIOVStandin = "sriov-standin"
	DrvAMDGPU       = "amdgpu"
	DrvNVIDIA       = "nvidia"
	DrvPFStub       = "pci-pf-stub"
	DrvNouveau      = "nouveau"
	DrvI915         = "i915"
	DrvNVMe         = "nvme"
	DrvIGB          = "igb"
	DrvIGBVF        = "igbvf"
	DrvXe           = "xe"
	// DrvXeVFIO is xe's VFIO variant driver (drivers/vfio/pci/xe, module
	// xe_vfio_pci): VFIO migration for xe VFs.
	DrvXeVFIO = "xe-vfio-pci"
	DrvSndHDA = "snd_hda_intel"
)

// Mdev bus driver names (kernel 6.x: the vendor's own mdev driver binds the
// instance; vfio_mdev is gone since 5.16).
const (
	MdevDrvNVIDIA = "nvidia-vgpu-vfio"
	MdevDrvGVTg   = "intel_vgpu_mdev"
	MdevDrvMbochs = "mbochs"
	MdevDrvMtty   = "mtty"
)

// Models returns the device model names in a stable order.
func Models() []string {
	return []string{ModelS7150, ModelMI25, ModelT4, ModelA100, ModelA100VF, ModelH100VF, ModelA30VF, ModelL40S, ModelGVTg,
		ModelPlain, ModelMbochs, ModelMtty, ModelQEMUNVMe, ModelIGB, ModelArcB50, ModelArcB60,
		ModelMI300X, ModelMI350X, ModelV710, ModelH200, ModelRTX4090}
}

func lookupModel(name string) (*modelDef, bool) {
	switch name {
	case ModelS7150:
		return &modelDef{
			name: name, summary: "AMD FirePro S7150 (1002:6929), old GIM (VFs at module load, vf_num), 16 VFs 1002:692f, 8 GB",
			ids:    pciIDs{vendor: 0x1002, device: 0x6929, subVendor: 0x1002, subDevice: 0x0334, class: 0x030000},
			driver: DrvGIM, modules: []string{DrvGIM}, altDrivers: []string{DrvAMDGPU},
			resets: []string{"flr", "bus"}, vramMB: 8192,
			sriov: &sriovDef{total: 16, offset: 1, stride: 1, vfDevice: 0x692f},
		}, true
	case ModelMI25:
		return &modelDef{
			name: name, summary: "AMD Radeon Instinct MI25 (1002:6860), generic SR-IOV (sriov_numvfs) stand-in, 16 VFs 1002:686c, 16 GB",
			ids:    pciIDs{vendor: 0x1002, device: 0x6860, subVendor: 0x1002, subDevice: 0x0c35, class: 0x038000},
			driver: DrvSRIOVStandin, modules: []string{DrvSRIOVStandin}, altDrivers: []string{DrvAMDGPU},
			resets: []string{"flr", "bus"}, vramMB: 16384,
			sriov: &sriovDef{total: 16, offset: 1, stride: 1, vfDevice: 0x686c},
		}, true
	case ModelT4:
		return &modelDef{
			name: name, summary: "NVIDIA Tesla T4 (10de:1eb8), mdev types nvidia-222..234, 252, 319..321 on the PF, 16 GB",
			ids:    pciIDs{vendor: 0x10de, device: 0x1eb8, subVendor: 0x10de, subDevice: 0x12a2, class: 0x030200, revision: 0xa1},
			driver: DrvNVIDIA, modules: []string{DrvNVIDIA},
			resets: []string{"flr", "bus"},
			sriov:  &sriovDef{total: 16, offset: 4, stride: 1, vfDevice: 0x1eb8},
			pfMdev: t4Types(),
		}, true
	case ModelA100:
		return &modelDef{
			name: name, summary: "NVIDIA A100 PCIe 40GB (10de:20f1) on a vGPU 16 host (or 17+ on a kernel before 6.8): 16 VFs from .4 by sriov-manage, one mdev per VF, 40 GB",
			ids:    pciIDs{vendor: 0x10de, device: 0x20f1, subVendor: 0x10de, subDevice: 0x145f, class: 0x030200, revision: 0xa1},
			driver: DrvNVIDIA, modules: []string{DrvNVIDIA, DrvPFStub},
			resets: []string{"flr", "bus"},
			sriov:  &sriovDef{total: 16, offset: 4, stride: 1, vfDevice: 0x20f1},
			vfMdev: a100Types(),
		}, true
	case ModelA100VF:
		// The same board on a vGPU 17+ host: per-VF types, not mdevs.
		m, _ := lookupModel(ModelA100)
		m.name, m.vfMdev, m.vfNV = name, nil, a100VFTypes()
		m.summary = "NVIDIA A100 PCIe 40GB (10de:20f1) on a vGPU 17+ host: 16 VFs from .4 by sriov-manage, per-VF types 468..473, with MIG on MIG-backed types 474..478 on GPU instances (SetMIG), 40 GB"
		return m, true
	case ModelH100VF:
		// 16 VFs: this model's assumption (no public source gives the
		// H100's sriov_totalvfs); vgpu reads it.
		return nvVFModel(name, "NVIDIA H100 PCIe 80GB", 0x2331, 0x1626, fakeIDTypes(60100, "H100", 81920, []int{4, 5, 8, 10, 16, 20, 40, 80},
			[]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"})), true
	case ModelA30VF:
		// 16 VFs: this model's assumption, as for the H100.
		return nvVFModel(name, "NVIDIA A30 24GB", 0x20b7, 0x1532, fakeIDTypes(60200, "A30", 24576, []int{4, 6, 8, 12, 24},
			[]string{"1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"})), true
	case ModelL40S:
		return &modelDef{
			name: name, summary: "NVIDIA L40S (10de:26b9), 32 VFs from .4 by sriov-manage, per-VF vGPU types 1145.., 48 GB",
			ids:    pciIDs{vendor: 0x10de, device: 0x26b9, subVendor: 0x10de, subDevice: 0x1851, class: 0x030200, revision: 0xa1},
			driver: DrvNVIDIA, modules: []string{DrvNVIDIA, DrvPFStub},
			resets: []string{"flr", "bus"},
			sriov:  &sriovDef{total: 32, offset: 4, stride: 1, vfDevice: 0x26b9},
			vfNV:   l40sTypes(),
		}, true
	case ModelGVTg:
		return &modelDef{
			name: name, summary: "Intel UHD Graphics 630 (8086:3e92) with GVT-g, types i915-GVTg_V5_{8,4,2,1} as the aperture allows (apertureMB, default 1024)",
			ids:    pciIDs{vendor: 0x8086, device: 0x3e92, subVendor: 0x8086, subDevice: 0x2212, class: 0x030000},
			driver: DrvI915, modules: []string{DrvI915},
			defaultAddr: "0000:00:02.0",
			resets:      []string{"flr", "bus"},
			pfMdev:      gvtgTypes(gvtgApertMB),
		}, true
	case ModelPlain:
		return geforce(name, "RTX 3090", "passthrough only", 0x2204, 0x1aef, 0x1454), true
	case ModelRTX4090:
		// No catalog entry: the built-in passthrough profile is all it
		// takes. The subsystem id is this fake's choice.
		return geforce(name, "RTX 4090", "no catalog entry, VGA class", 0x2684, 0x22ba, 0x167c), true
	case ModelH200:
		// As the real one showed passed through to a VM (docs/real-hosts.md,
		// "NVIDIA H200 SXM 141GB in a VM"): the hypervisor hides
		// its SR-IOV capability; no reset_method was recorded.
		return &modelDef{
			name: name, summary: "NVIDIA H200 SXM 141GB (10de:2335) as a VM guest sees it passed through: 3D controller, no SR-IOV capability, on nvidia",
			ids:    pciIDs{vendor: 0x10de, device: 0x2335, subVendor: 0x10de, subDevice: 0x18bf, class: 0x030200, revision: 0xa1},
			driver: DrvNVIDIA, modules: []string{DrvNVIDIA},
		}, true
	case ModelMbochs:
		return &modelDef{
			name: name, summary: "kernel sample mbochs: virtual parent, types mbochs-small/medium/large on a 256 MB pool",
			virtual: true, pfMdev: mbochsTypes(),
		}, true
	case ModelMtty:
		return &modelDef{
			name: name, summary: "kernel sample mtty: virtual parent, types mtty-1/mtty-2 on a 24-port pool",
			virtual: true, pfMdev: mttyTypes(),
		}, true
	case ModelQEMUNVMe:
		return &modelDef{
			name: name, summary: "QEMU NVMe (1b36:0010) SR-IOV PF, 4 VFs; nvme fails on the VFs",
			ids:    pciIDs{vendor: 0x1b36, device: 0x0010, subVendor: 0x1af4, subDevice: 0x1100, class: 0x010802, revision: 0x02},
			driver: DrvNVMe, modules: []string{DrvNVMe},
			resets: []string{"flr", "bus"},
			sriov:  &sriovDef{total: 4, offset: 1, stride: 1, vfDevice: 0x0010},
		}, true
	case ModelArcB50, ModelArcB60:
		// Battlemage G21 on xe (xe.go). The VFs carry the PF's device id.
		// TotalVFs 16 is this model's assumption: no public source gives
		// the B-series' (docs/vendors/intel.md, "Not yet"); vgpu reads sriov_totalvfs. The
		// subsystem id is a B580's (intel/linux-intel-lts#33).
		dev, gb := uint16(0xe212), 16
		if name == ModelArcB60 {
			dev, gb = 0xe211, 24
		}
		return &modelDef{
			name: name, summary: fmt.Sprintf("Intel Arc Pro %s (8086:%04x) on xe, SR-IOV through sriov_numvfs, sriov_admin scheduling profiles, %d GB",
				strings.ToUpper(strings.TrimPrefix(name, "arc-pro-")), dev, gb),
			ids:    pciIDs{vendor: 0x8086, device: dev, subVendor: 0x8086, subDevice: 0x1100, class: 0x030000},
			driver: DrvXe, modules: []string{DrvXe},
			resets: []string{"flr", "bus"}, vramMB: gb << 10,
			sriov: &sriovDef{total: 16, offset: 1, stride: 1, vfDevice: dev},
		}, true
	case ModelMI300X:
		// Ids: GIM 8.0.0.K libgv amdgv_device.c (PF 74a1) and
		// amdgv_marketing_name.c (VF 74b5). VF counts and modes: the
		// 8.5.0.K-9.4.0.K release notes (1 SPX/NPS1, 8 CPX/NPS4); the
		// source's partition table also takes 2 (DPX) and 4 (QPX) on NPS1.
		return instinct(name, "MI300X", 0x74a1, 0x74b5, 192, []int{1, 2, 4, 8}, map[int]int{1: 1, 2: 1, 4: 1, 8: 4}), true
	case ModelMI350X:
		// Ids: ROCm/gpu-operator's NFD rule (PF 75a0, VF 75b0). VF counts
		// and modes: release notes 9.1-9.4.0.K (1 SPX/NPS1, 2 DPX/NPS2,
		// 8 CPX/NPS2). Its partition profile table is not public (8.0.0.K
		// predates it): MI300X's is assumed.
		return instinct(name, "MI350X", 0x75a0, 0x75b0, 288, []int{1, 2, 8}, map[int]int{1: 1, 2: 2, 8: 2}), true
	case ModelV710:
		// Ids: ROCm/gpu-operator's NFD rule (PF 7460, VF 7461 "Radeon Pro
		// V710 MxGPU"). VF counts 1-12: release notes 9.1-9.4.0.K. It has
		// no compute partitions: one mode, whatever the count.
		return &modelDef{
			name: name, summary: "AMD Radeon PRO V710 (1002:7460), new GIM (VFs at load from vf_num, amd-smi set --num-vf), 1-12 VFs 1002:7461, 28 GB",
			ids:    pciIDs{vendor: 0x1002, device: 0x7460, subVendor: 0x1002, subDevice: 0x0e0d, class: 0x038000},
			driver: DrvGIM, modules: []string{DrvGIM},
			resets: []string{"flr", "bus"}, vramMB: 28 * 1024,
			sriov:  &sriovDef{total: 12, offset: 1, stride: 1, vfDevice: 0x7461},
			newGIM: &newGIMDef{counts: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
		}, true
	case ModelIGB:
		// As QEMU's igb shows it in the lab (e2e/lab): QEMU's subsystem ids,
		// VFs at offset 128, stride 2 (01:10.0, 01:10.2, ...) taken by igbvf.
		return &modelDef{
			name: name, summary: "Intel 82576 (8086:10c9) as QEMU's igb, SR-IOV PF, 7 VFs 8086:10ca on igbvf",
			ids:    pciIDs{vendor: 0x8086, device: 0x10c9, subVendor: 0x1af4, subDevice: 0x1100, class: 0x020000, revision: 0x01},
			driver: DrvIGB, modules: []string{DrvIGB, DrvIGBVF},
			resets: []string{"flr", "pm", "bus"},
			sriov:  &sriovDef{total: 8, driverMax: 7, offset: 128, stride: 2, vfDevice: 0x10ca},
		}, true
	}
	return nil, false
}

// instinct is an AMD Instinct GPU on new GIM: 8 XCDs (CPX is 8
// partitions), MI300X's partition profiles, VFs from offset 1. TotalVFs
// 8, the offset and the subsystem id are this model's assumptions: no
// source read gives them.
func instinct(name, board string, dev, vf uint16, gb int, counts []int, memory map[int]int) *modelDef {
	var list []string
	for _, n := range counts {
		list = append(list, fmt.Sprint(n))
	}
	return &modelDef{
		name: name, summary: fmt.Sprintf("AMD Instinct %s (1002:%04x), new GIM (VFs at load from vf_num, amd-smi set --num-vf), %s VFs 1002:%04x, %d GB",
			board, dev, strings.Join(list, "/"), vf, gb),
		ids:    pciIDs{vendor: 0x1002, device: dev, subVendor: 0x1002, subDevice: dev, class: 0x120000},
		driver: DrvGIM, modules: []string{DrvGIM},
		resets: []string{"flr", "bus"}, vramMB: gb * 1024,
		sriov:  &sriovDef{total: 8, offset: 1, stride: 1, vfDevice: vf},
		newGIM: &newGIMDef{counts: counts, numXCC: 8, profiles: []int{1, 2, 4, 8}, memory: memory},
	}
}

// geforce is an NVIDIA GeForce board on nouveau for passthrough: VGA
// class, bus reset only, its HD audio function (on snd_hda_intel) at .1 in
// the same IOMMU group, both with the board's subsystem id.
func geforce(name, board, note string, dev, audio, subDev uint16) *modelDef {
	return &modelDef{
		name: name, summary: fmt.Sprintf("NVIDIA GeForce %s (10de:%04x), %s; HD audio 10de:%04x at .1 in its IOMMU group", board, dev, note, audio),
		ids:    pciIDs{vendor: 0x10de, device: dev, subVendor: 0x10de, subDevice: subDev, class: 0x030000, revision: 0xa1},
		driver: DrvNouveau, modules: []string{DrvNouveau, DrvSndHDA},
		resets: []string{"bus"},
		functions: []funcDef{{fn: 1, driver: DrvSndHDA,
			ids: pciIDs{vendor: 0x10de, device: audio, subVendor: 0x10de, subDevice: subDev, class: 0x040300, revision: 0xa1}}},
	}
}

func nvDesc(heads, frl, fbMB int, res string, maxInst int) string {
	return fmt.Sprintf("num_heads=%d, frl_config=%d, framebuffer=%dM, max_resolution=%s, max_instance=%d\n",
		heads, frl, fbMB, res, maxInst)
}

const (
	t4FramebufferMB   = 16384
	a100FramebufferMB = 40960
	l40sFramebufferMB = 49152
)

func t4Types() *mdevDef {
	d := &mdevDef{driver: MdevDrvNVIDIA, prefix: "nvidia", capacity: []int{t4FramebufferMB}, mix: mixByType,
		vendorDir: "nvidia", vendorAttrs: nvidiaMdevAttrs, vgpuParams: true}
	add := func(id int, name string, heads, frl, fb int, res string) {
		d.types = append(d.types, mdevTypeDef{
			sysfsName: fmt.Sprint(id), prettyName: "GRID T4-" + name,
			description: nvDesc(heads, frl, fb, res, t4FramebufferMB/fb),
			cost:        []int{fb}, sizeMB: fb,
		})
	}
	// The ids the NVIDIA host driver registers (mdevctl listings; vgpu_unlock's table).
	add(222, "1B", 4, 45, 1024, "5120x2880")
	add(223, "2B", 4, 45, 2048, "5120x2880")
	add(224, "2B4", 4, 45, 2048, "5120x2880")
	add(225, "1A", 1, 60, 1024, "1280x1024")
	add(226, "2A", 1, 60, 2048, "1280x1024")
	add(227, "4A", 1, 60, 4096, "1280x1024")
	add(228, "8A", 1, 60, 8192, "1280x1024")
	add(229, "16A", 1, 60, 16384, "1280x1024")
	add(230, "1Q", 4, 60, 1024, "5120x2880")
	add(231, "2Q", 4, 60, 2048, "7680x4320")
	add(232, "4Q", 4, 60, 4096, "7680x4320")
	add(233, "8Q", 4, 60, 8192, "7680x4320")
	add(234, "16Q", 4, 60, 16384, "7680x4320")
	add(252, "1B4", 4, 45, 1024, "5120x2880")
	add(319, "4C", 1, 60, 4096, "4096x2160")
	add(320, "8C", 1, 60, 8192, "4096x2160")
	add(321, "16C", 1, 60, 16384, "4096x2160")
	return d
}

func a100Types() *mdevDef {
	d := &mdevDef{driver: MdevDrvNVIDIA, prefix: "nvidia", capacity: []int{a100FramebufferMB}, mix: mixByType,
		perParent: 1, vendorDir: "nvidia", vendorAttrs: nvidiaMdevAttrs, vgpuParams: true}
	for i, gb := range []int{4, 5, 8, 10, 20, 40} {
		fb := gb * 1024
		d.types = append(d.types, mdevTypeDef{
			sysfsName: fmt.Sprint(468 + i), prettyName: fmt.Sprintf("NVIDIA A100-%dC", gb),
			description: nvDesc(1, 60, fb, "4096x2160", a100FramebufferMB/fb),
			cost:        []int{fb}, sizeMB: fb,
		})
	}
	return d
}

// a100VFTypes are the A100 PCIe 40GB's vGPU types with the ids of the
// driver's vgpuConfig.xml (510.47.03, as listed by the vgpu_unlock wiki and
// OpenForBC's README): time-sliced 468-473, MIG-backed 474-478. Whether
// R550+ keeps these ids on vendor-specific VFIO is not confirmed.
func a100VFTypes() *nvDef {
	d := &nvDef{capacityMB: a100FramebufferMB}
	for i, gb := range []int{4, 5, 8, 10, 20, 40} {
		d.types = append(d.types, nvTypeDef{id: 468 + i, name: fmt.Sprintf("NVIDIA A100-%dC", gb), sizeMB: gb * 1024})
	}
	for i, gi := range []string{"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"} {
		var g, gb int
		fmt.Sscanf(gi, "%dg.%dgb", &g, &gb)
		d.mig = append(d.mig, nvMIGTypeDef{id: 474 + i, name: fmt.Sprintf("NVIDIA A100-%d-%dC", g, gb), gi: gi})
	}
	return d
}

// nvVFModel is a board on a vGPU 17+ host whose types carry the fake's own
// ids (fakeIDTypes): 16 VFs from .4 by sriov-manage, per-VF types, with MIG
// on MIG-backed types on GPU instances (SetMIG). The subsystem id is the
// fake's choice too: no source at hand confirms it.
func nvVFModel(name, board string, device, subDevice uint16, vf *nvDef) *modelDef {
	return &modelDef{
		name: name, summary: fmt.Sprintf("%s (10de:%04x) on a vGPU 17+ host: 16 VFs from .4 by sriov-manage, per-VF C types with this fake's own ids (%d..), with MIG on MIG-backed types on GPU instances (SetMIG), %d GB",
			board, device, vf.types[0].id, vf.capacityMB/1024),
		ids:    pciIDs{vendor: 0x10de, device: device, subVendor: 0x10de, subDevice: subDevice, class: 0x030200, revision: 0xa1},
		driver: DrvNVIDIA, modules: []string{DrvNVIDIA, DrvPFStub},
		resets: []string{"flr", "bus"},
		sriov:  &sriovDef{total: 16, offset: 4, stride: 1, vfDevice: device},
		vfNV:   vf,
	}
}

// fakeIDTypes are a board's C types as NVIDIA's config names them
// (NVIDIA/vgpu-device-manager examples/config-example.yaml, vGPU 20.0):
// time-sliced "<board>-<GB>C" and MIG-backed "<board>-<g>-<GB>C[ME]", one
// per GPU instance profile. No public source gives these boards' type ids:
// the ids, counted from base, are this fake's own, NOT NVIDIA's, and
// VGPUTypes gives internal/sim/nvml the same ones for NVML.
func fakeIDTypes(base int, board string, fbMB int, slicedGB []int, gis []string) *nvDef {
	d := &nvDef{capacityMB: fbMB}
	id := base
	for _, gb := range slicedGB {
		d.types = append(d.types, nvTypeDef{id: id, name: fmt.Sprintf("NVIDIA %s-%dC", board, gb), sizeMB: gb * 1024})
		id++
	}
	for _, gi := range gis {
		var g, gb int
		fmt.Sscanf(gi, "%dg.%dgb", &g, &gb)
		me := ""
		if strings.HasSuffix(gi, "+me") {
			me = "ME"
		}
		d.mig = append(d.mig, nvMIGTypeDef{id: id, name: fmt.Sprintf("NVIDIA %s-%d-%dC%s", board, g, gb, me), gi: gi})
		id++
	}
	return d
}

// VGPUType is a vGPU type as a model's VFs list it.
type VGPUType struct {
	ID   int
	Name string
}

// VGPUTypes lists every vGPU type, time-sliced and MIG-backed, that the
// VFs of model can list (nvmlDeviceGetSupportedVgpus on the same board);
// nil for a model without per-VF types.
func VGPUTypes(model string) []VGPUType {
	m, ok := lookupModel(model)
	if !ok || m.vfNV == nil {
		return nil
	}
	var out []VGPUType
	for _, t := range m.vfNV.types {
		out = append(out, VGPUType{t.id, t.name})
	}
	for _, t := range m.vfNV.mig {
		out = append(out, VGPUType{t.id, t.name})
	}
	return out
}

func l40sTypes() *nvDef {
	d := &nvDef{capacityMB: l40sFramebufferMB}
	id := 1145
	for _, gb := range []int{1, 2} {
		d.types = append(d.types, nvTypeDef{id: id, name: fmt.Sprintf("NVIDIA L40S-%dB", gb), sizeMB: gb * 1024})
		id++
	}
	for _, gb := range []int{1, 2, 3, 4, 6, 8, 12, 16, 24, 48} {
		d.types = append(d.types, nvTypeDef{id: id, name: fmt.Sprintf("NVIDIA L40S-%dQ", gb), sizeMB: gb * 1024})
		id++
	}
	return d
}

// GVT-g (drivers/gpu/drm/i915/gvt, kernel 6.x). The guests' room is what
// the host keeps back from the GGTT (gvt.h: HOST_LOW_GM_SIZE 128 MB of the
// aperture, HOST_HIGH_GM_SIZE 384 MB of the rest, HOST_FENCE 4 of Gen9's 32
// fences). intel_gvt_init_vgpu_types registers the types of
// intel_vgpu_configs in order while their low GM fits, and
// intel_vgpu_get_available gives min over low GM, high GM and fences.
const (
	gvtgGGTTMB  = 4096 // GGMS 8 MB of gen8 PTEs map 4 GB
	gvtgFences  = 32   // intel_ggtt_init_fences, gen >= 7
	gvtgApertMB = 1024 // firmware's aperture size unless the host file says
)

func gvtgTypes(apertureMB int) *mdevDef {
	low, high, fences := apertureMB-128, gvtgGGTTMB-apertureMB-384, gvtgFences-4
	d := &mdevDef{driver: MdevDrvGVTg, prefix: "i915", capacity: []int{low, high, fences},
		vendorDir: "intel_vgpu", vendorAttrs: gvtgMdevAttrs}
	for _, c := range []struct {
		name, low, high, weight int
		res                     string
	}{{8, 64, 384, 2, "1024x768"}, {4, 128, 512, 4, "1920x1200"}, {2, 256, 1024, 8, "1920x1200"}, {1, 512, 2048, 16, "1920x1200"}} {
		if low/c.low == 0 {
			break
		}
		d.types = append(d.types, mdevTypeDef{
			sysfsName: fmt.Sprintf("GVTg_V5_%d", c.name),
			description: fmt.Sprintf("low_gm_size: %dMB\nhigh_gm_size: %dMB\nfence: %d\nresolution: %s\nweight: %d\n",
				c.low, c.high, 4, c.res, c.weight),
			cost: []int{c.low, c.high, 4}, sizeMB: c.low + c.high,
		})
	}
	return d
}

// mbochs (samples/vfio-mdev/mbochs.c): types "small"/"medium"/"large" with
// pretty names "mbochs-small"..., 4/16/64 MB from a 256 MB module pool.
func mbochsTypes() *mdevDef {
	d := &mdevDef{driver: MdevDrvMbochs, prefix: "mbochs", capacity: []int{256},
		vendorDir: "vendor", vendorAttrs: func(_ string, t *mdevTypeDef) map[string]string {
			return map[string]string{"memory": fmt.Sprintf("%d MB\n", t.sizeMB)}
		}}
	for _, s := range []struct {
		name string
		mb   int
	}{{"small", 4}, {"medium", 16}, {"large", 64}} {
		d.types = append(d.types, mdevTypeDef{
			sysfsName: s.name, prettyName: "mbochs-" + s.name,
			description: fmt.Sprintf("virtual display, %d MB video memory\n", s.mb),
			cost:        []int{s.mb}, sizeMB: s.mb,
		})
	}
	return d
}

// mtty (samples/vfio-mdev/mtty.c): types "1"/"2" ("Single/Dual port
// serial") drawing on MAX_MTTYS = 24 ports; no description attribute.
func mttyTypes() *mdevDef {
	return &mdevDef{driver: MdevDrvMtty, prefix: "mtty", capacity: []int{24},
		vendorDir: "vendor", vendorAttrs: func(uuid string, _ *mdevTypeDef) map[string]string {
			return map[string]string{"sample_mdev_dev": "This is MDEV " + uuid + "\n"}
		},
		types: []mdevTypeDef{
			{sysfsName: "1", prettyName: "Single port serial", cost: []int{1}},
			{sysfsName: "2", prettyName: "Dual port serial", cost: []int{2}},
		}}
}

func nvidiaMdevAttrs(string, *mdevTypeDef) map[string]string {
	return map[string]string{"vm_name": "\n"}
}

func gvtgMdevAttrs(string, *mdevTypeDef) map[string]string {
	return map[string]string{"vgpu_id": "1\n"}
}

// driverDef is a PCI driver's static identity: its id table and whether it
// implements sriov_configure.
type driverDef struct {
	name      string
	ids       []pciID
	class     uint32 // match on class (masked to classMask) when non-zero
	classMask uint32
	sriov     bool
	// keepsVFs: remove() does not disable SR-IOV (nvme); the VFs outlive
	// the PF's driver.
	keepsVFs bool
	// vfio: a vfio_pci_core driver (vfio-pci and its variants): the
	// device gets /dev/vfio/<group> and is enabled when a user opens it.
	vfio bool
	// overrideOnly: every id is PCI_DRIVER_OVERRIDE_DEVICE_VFIO, which
	// matches only a device whose driver_override names the driver.
	overrideOnly bool
}

type pciID struct{ vendor, device uint32 }

// driverOrder is the registration (module load) order, which is the order
// the bus tries drivers when probing a device.
func driverOrder() []driverDef {
	return []driverDef{
		{name: DrvPCIePort, class: 0x060400, classMask: 0xffff00},
		// pci-stub.ids= as GIM hosts configure it: the GIM VFs land here.
		{name: DrvPCIStub, ids: []pciID{{0x1002, 0x692f}, {0x1002, 0x686c}}},
		{name: DrvVFIOPCI, vfio: true},
		// gim registers with a NULL id_table and no sriov_configure: it
		// finds its GPUs itself (gim.go).
		gimDriverDef(),
		{name: DrvSRIOVStandin, ids: []pciID{{0x1002, 0x6860}}, sriov: true},
		// nvidia has no sriov_configure (open-gpu-kernel-modules
		// kernel-open/nvidia/nv-pci.c, nv_pci_driver), and its remove()
		// leaves SR-IOV as it is: sriov-manage relies on both.
		{name: DrvNVIDIA, ids: []pciID{{0x10de, 0x1eb8}, {0x10de, 0x20f1}, {0x10de, 0x26b9}, {0x10de, 0x2331}, {0x10de, 0x20b7}, {0x10de, 0x2335}}, keepsVFs: true},
		// pci-pf-stub: no ids of its own (new_id only), sriov_configure =
		// pci_sriov_configure_simple, no remove(). Loaded after nvidia, so
		// new VFs probe nvidia first.
		{name: DrvPFStub, sriov: true, keepsVFs: true},
		{name: DrvI915, ids: []pciID{{0x8086, 0x3e92}, {0x8086, 0x3e9b}, {0x8086, 0x3e91}}},
		// nvme's remove() leaves SR-IOV enabled (measured in the lab).
		{name: DrvNVMe, class: 0x010802, classMask: 0xffffff, sriov: true, keepsVFs: true},
		{name: DrvNouveau, ids: []pciID{{0x10de, 0x2204}, {0x10de, 0x2684}}},
		{name: DrvAMDGPU, ids: []pciID{{0x1002, 0x6929}, {0x1002, 0x6860}, {0x1002, 0x692f}, {0x1002, 0x686c}}},
		{name: DrvIGB, ids: []pciID{{0x8086, 0x10c9}}, sriov: true},
		{name: DrvIGBVF, ids: []pciID{{0x8086, 0x10ca}}},
		// xe binds PFs and (in VF mode) VFs of the same ids.
		{name: DrvXe, ids: []pciID{{0x8086, 0xe211}, {0x8086, 0xe212}}, sriov: true},
		// xe_vfio_pci_table: INTEL_BMG_IDS (and PTL, WCL) by
		// PCI_DRIVER_OVERRIDE_DEVICE_VFIO, so driver_override only.
		{name: DrvXeVFIO, ids: []pciID{{0x8086, 0xe211}, {0x8086, 0xe212}}, vfio: true, overrideOnly: true},
		{name: DrvSndHDA, class: 0x040300, classMask: 0xffff00},
	}
}

// driverNames lists every driver a host file may name.
func driverNames() []string {
	var out []string
	for _, d := range driverOrder() {
		out = append(out, d.name)
	}
	return out
}

// Root ports the GPUs sit behind: Intel Sky Lake-E PCIe root port A.
func rootPortIDs() pciIDs {
	return pciIDs{vendor: 0x8086, device: 0x2030, subVendor: 0x8086, subDevice: 0x0000, class: 0x060400, revision: 0x04}
}
