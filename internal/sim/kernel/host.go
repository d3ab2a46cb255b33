package simkernel

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

// HostVersion is the only host description schema version.
const HostVersion = "v1"

// DriverNone in HostGPU.Driver leaves the device unbound at boot.
const DriverNone = "none"

// Host describes a simulated machine.
type Host struct {
	Version string `yaml:"version"`
	// NUMANodes is the number of NUMA nodes; 0 means 1.
	NUMANodes int       `yaml:"numaNodes"`
	GPUs      []HostGPU `yaml:"gpus"`
	// Unloaded lists modules the host has not loaded that a vGPU host
	// normally has ("vfio-pci", "vfio_iommu_type1"), for tests of a stock
	// host.
	Unloaded []string `yaml:"-"`
	// Loaded lists drivers loaded beyond those the models need
	// ("pci-pf-stub" on the lab's host, for the differential test).
	Loaded []string `yaml:"-"`
	// Files are host files present at boot, by absolute path
	// ("/etc/gim_config" as a previous boot left it).
	Files map[string]string `yaml:"-"`
	// OnFile, when set, learns every host file the kernel writes (GIM
	// saving its config), so that a caller can keep them across a reboot.
	OnFile func(path, data string) `yaml:"-"`
	// XeMaxVFs is Intel xe's max_vfs module parameter: nil is Linux 7.x's
	// default (unlimited), 0 runs no PF in PF mode (the older default).
	XeMaxVFs *int `yaml:"xeMaxVFs"`
	// XeAdmin is the kernel's sriov_admin ABI: "" or "6.19" (scheduling
	// profiles), "7.0" (and vram_quota) or "none" (before 6.19).
	XeAdmin string `yaml:"xeAdmin"`
	// XeVFIO: module xe_vfio_pci is loaded. Its ids match only through
	// driver_override (PCI_DRIVER_OVERRIDE_DEVICE_VFIO: modalias
	// "vfio_pci:..."), so no VF's uevent loads it: off unless the admin
	// loads it (modprobe xe-vfio-pci). Linux 6.19 brought it.
	XeVFIO bool `yaml:"xeVFIO"`
	// NVIDIADriver is the version the nvidia module reports in
	// /sys/module/nvidia/version ("550.54.10"): "" is vGPU 16.9's
	// (535.230.02) on a host with model a100 and vGPU 17.0's (550.54.10)
	// otherwise. Models with per-VF types (a100-vf, h100-vf, a30-vf, l40s)
	// need 550 or later; a100 takes any (550+: a kernel before 6.8).
	NVIDIADriver string `yaml:"nvidiaDriver"`
	// NVIDIADriverKind is which NVIDIA driver the nvidia module is:
	// "vgpu-host" (NVIDIA's vGPU host driver, with its module
	// nvidia_vgpu_vfio, mdev types and per-VF types) or "datacenter" (no
	// vGPU: the nvidia module ignores VFs, registers no mdev types, and
	// sriov-manage is not installed). "" is datacenter in a guest and
	// vgpu-host otherwise.
	NVIDIADriverKind string `yaml:"nvidiaDriverKind"`
	// NoIOMMU: the kernel runs without an IOMMU (no intel_iommu=on, or a
	// VM without a vIOMMU): no PCI function has an iommu_group and
	// vfio-pci takes none.
	NoIOMMU bool `yaml:"noIOMMU"`
	// Guest: the host is a VM's guest, of Guest's hypervisor: "qemu"
	// gives it QEMU's i440FX host bridge at 0000:00:00.0 (subsystem
	// 1af4:1100, as QEMU gives the hardware it emulates). "" is bare metal.
	Guest string `yaml:"guest"`
	// Kernel is the release /proc/sys/kernel/osrelease shows ("6.8.0"):
	// "" is xeAdmin's (6.19.0; 7.0.0; 6.12.0 with none), or 6.5.0 on a host
	// whose NVIDIA VFs take mdevs under R550+ (NVIDIA's per-VF types need
	// 6.8's VFIO variant drivers).
	Kernel string `yaml:"kernel"`
	// I915EnableGVT is i915's enable_gvt parameter (default N) and KVMGT
	// whether module kvmgt is loaded at boot (modprobe kvmgt loads it
	// later): i915 registers a GVT-g iGPU as an mdev parent only with both
	// (intel_gvt.c: intel_gvt_init_device skips the device unless
	// enable_gvt, and runs only once kvmgt's init has called
	// intel_gvt_set_ops).
	I915EnableGVT bool `yaml:"i915EnableGVT"`
	KVMGT         bool `yaml:"kvmgt"`
}

// HostGPU is one device of the host.
type HostGPU struct {
	Model string `yaml:"model"`
	// Address is the PF's address; zero for virtual models (mbochs, mtty)
	// and for models with a usual address (gvtg: 0000:00:02.0).
	Address pci.Address `yaml:"address"`
	// NUMANode the device reports; -1 as firmware without proximity info.
	NUMANode int `yaml:"numaNode"`
	// Driver bound at boot: "" the model's default, "none" unbound.
	Driver string `yaml:"driver"`
	// SharedGroup: the root port above the device has no ACS, so the port,
	// the device (with its functions) and every other SharedGroup device
	// behind that port are one IOMMU group, as on many desktop boards.
	SharedGroup bool `yaml:"sharedGroup"`
	// ApertureMB is a GVT-g iGPU's aperture as the firmware sets it (128,
	// 256, 512, 1024, 2048; 0: 1024): it bounds which types and how many.
	ApertureMB int `yaml:"apertureMB"`
	// BootVGA: the firmware used the device as its boot display, so its
	// boot_vga reads 1 (a VGA-class model; at most one per host).
	BootVGA bool `yaml:"bootVGA"`
}

// rawHost mirrors Host with strings, so that errors can name the field and
// the value as written.
type rawHost struct {
	Version      string   `yaml:"version"`
	NUMANodes    *int     `yaml:"numaNodes"`
	GPUs         []rawGPU `yaml:"gpus"`
	XeMaxVFs     *int     `yaml:"xeMaxVFs"`
	XeAdmin      string   `yaml:"xeAdmin"`
	XeVFIO       bool     `yaml:"xeVFIO"`
	NVIDIADriver string   `yaml:"nvidiaDriver"`
	NVIDIAKind   string   `yaml:"nvidiaDriverKind"`
	NoIOMMU      bool     `yaml:"noIOMMU"`
	Guest        string   `yaml:"guest"`
	Kernel       string   `yaml:"kernel"`
	EnableGVT    bool     `yaml:"i915EnableGVT"`
	KVMGT        bool     `yaml:"kvmgt"`
}

type rawGPU struct {
	Model       string `yaml:"model"`
	Address     string `yaml:"address"`
	NUMANode    *int   `yaml:"numaNode"`
	Driver      string `yaml:"driver"`
	SharedGroup bool   `yaml:"sharedGroup"`
	ApertureMB  int    `yaml:"apertureMB"`
	BootVGA     bool   `yaml:"bootVGA"`
}

// LoadHost reads a host description file (see ParseHost).
func LoadHost(path string) (Host, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Host{}, fmt.Errorf("read host description: %w", err)
	}
	return ParseHost(path, data)
}

// ParseHost decodes a YAML host description strictly: unknown fields, a
// missing or unknown version, unknown models and drivers, bad or duplicate
// addresses and an empty gpus list are errors naming the file and field.
func ParseHost(name string, data []byte) (Host, error) {
	fail := func(format string, args ...any) (Host, error) {
		return Host{}, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var raw rawHost
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return fail("empty host description (want version: %s and a gpus list)", HostVersion)
		}
		return Host{}, fmt.Errorf("%s: %w", name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fail("more than one YAML document")
	}
	switch raw.Version {
	case HostVersion:
	case "":
		return fail("version: missing (allowed: %s)", HostVersion)
	default:
		return fail("version: unknown %q (allowed: %s)", raw.Version, HostVersion)
	}
	h := Host{Version: raw.Version, NUMANodes: 1, XeMaxVFs: raw.XeMaxVFs, XeAdmin: raw.XeAdmin, XeVFIO: raw.XeVFIO, NVIDIADriver: raw.NVIDIADriver, Kernel: raw.Kernel,
		I915EnableGVT: raw.EnableGVT, KVMGT: raw.KVMGT, NVIDIADriverKind: raw.NVIDIAKind, NoIOMMU: raw.NoIOMMU, Guest: raw.Guest}
	if raw.NUMANodes != nil {
		h.NUMANodes = *raw.NUMANodes
	}
	if len(raw.GPUs) == 0 {
		return fail("gpus: empty (list at least one device; models: %s)", strings.Join(Models(), ", "))
	}
	for i, g := range raw.GPUs {
		hg := HostGPU{Model: g.Model, Driver: g.Driver, SharedGroup: g.SharedGroup, ApertureMB: g.ApertureMB, BootVGA: g.BootVGA}
		if g.NUMANode != nil {
			hg.NUMANode = *g.NUMANode
		}
		if g.Address != "" {
			a, err := pci.ParseAddress(g.Address)
			if err != nil {
				return fail("gpus[%d].address: %v", i, err)
			}
			hg.Address = a
		}
		h.GPUs = append(h.GPUs, hg)
	}
	if err := h.Validate(); err != nil {
		return Host{}, fmt.Errorf("%s: %w", name, err)
	}
	return h, nil
}

// Validate checks a host description; New calls it. Errors name the field.
func (h Host) Validate() error {
	if h.Version != "" && h.Version != HostVersion {
		return fmt.Errorf("version: unknown %q (allowed: %s)", h.Version, HostVersion)
	}
	nodes := h.numaNodes()
	switch h.XeAdmin {
	case "", XeAdmin619, XeAdmin70, XeAdminNone:
	default:
		return fmt.Errorf("xeAdmin: unknown %q (allowed: %s, %s, %s)", h.XeAdmin, XeAdmin619, XeAdmin70, XeAdminNone)
	}
	if h.XeVFIO && h.XeAdmin == XeAdminNone {
		return fmt.Errorf("xeVFIO: xe-vfio-pci came with Linux 6.19, and xeAdmin: none is a kernel before it")
	}
	if h.XeMaxVFs != nil && *h.XeMaxVFs < 0 {
		return fmt.Errorf("xeMaxVFs: %d is negative (omit it for the unlimited default)", *h.XeMaxVFs)
	}
	if h.NUMANodes < 0 || h.NUMANodes > 64 {
		return fmt.Errorf("numaNodes: %d out of range (allowed: 1 to 64)", h.NUMANodes)
	}
	if h.hostHasNewGIM() && slices.ContainsFunc(h.GPUs, func(g HostGPU) bool { return g.Model == ModelS7150 }) {
		// Both drivers are the module gim: a host loads one.
		return fmt.Errorf("gpus: an s7150 (old GIM) and a new-GIM GPU (mi300x, mi350x, v710) cannot share a host: both need the module gim")
	}
	switch h.Guest {
	case "", GuestQEMU:
	default:
		return fmt.Errorf("guest: unknown hypervisor %q (allowed: %s, or omit it for bare metal)", h.Guest, GuestQEMU)
	}
	// (The guest's host bridge is 0000:00:00.0, an address that reads as
	// none: no GPU can take it.)
	seenAddr := map[pci.Address]int{}
	bootVGA := -1
	seenVirtual := map[string]int{}
	for i, g := range h.GPUs {
		m, ok := lookupModel(g.Model)
		if !ok {
			if g.Model == "" {
				return fmt.Errorf("gpus[%d].model: missing (allowed: %s)", i, strings.Join(Models(), ", "))
			}
			return fmt.Errorf("gpus[%d].model: unknown model %q (allowed: %s)", i, g.Model, strings.Join(Models(), ", "))
		}
		if g.ApertureMB != 0 {
			if g.Model != ModelGVTg {
				return fmt.Errorf("gpus[%d].apertureMB: only a gvtg iGPU has a GVT-g aperture (model %s)", i, g.Model)
			}
			if !slices.Contains([]int{128, 256, 512, 1024, 2048}, g.ApertureMB) {
				return fmt.Errorf("gpus[%d].apertureMB: %d is no aperture size firmware offers (allowed: 128, 256, 512, 1024, 2048)", i, g.ApertureMB)
			}
		}
		if g.BootVGA {
			if m.virtual || m.ids.class>>8 != pciClassVGA {
				return fmt.Errorf("gpus[%d].bootVGA: model %s is no VGA-class device (class 0x%06x), and only those show boot_vga", i, g.Model, m.ids.class)
			}
			if bootVGA >= 0 {
				return fmt.Errorf("gpus[%d].bootVGA: gpus[%d] is the boot display already (the firmware uses one)", i, bootVGA)
			}
			bootVGA = i
		}
		if g.SharedGroup && h.NoIOMMU {
			return fmt.Errorf("gpus[%d].sharedGroup: the host has noIOMMU: there are no IOMMU groups to share", i)
		}
		if g.NUMANode < -1 || g.NUMANode >= nodes {
			return fmt.Errorf("gpus[%d].numaNode: %d out of range (allowed: -1 to %d; the host has numaNodes: %d)",
				i, g.NUMANode, nodes-1, nodes)
		}
		if m.virtual {
			if !g.Address.IsZero() {
				return fmt.Errorf("gpus[%d].address: model %s is a virtual mdev parent and takes no address", i, g.Model)
			}
			if g.Driver != "" {
				return fmt.Errorf("gpus[%d].driver: model %s is a virtual mdev parent and takes no driver", i, g.Model)
			}
			if g.SharedGroup {
				return fmt.Errorf("gpus[%d].sharedGroup: model %s is a virtual mdev parent and has no IOMMU group of its own", i, g.Model)
			}
			if j, dup := seenVirtual[g.Model]; dup {
				return fmt.Errorf("gpus[%d].model: %s already listed at gpus[%d] (the sample module has one parent)", i, g.Model, j)
			}
			seenVirtual[g.Model] = i
			continue
		}
		addr := g.Address
		if addr.IsZero() {
			if m.defaultAddr == "" {
				return fmt.Errorf("gpus[%d].address: missing (model %s needs a PCI address like 0000:03:00.0)", i, g.Model)
			}
			addr = pci.MustParseAddress(m.defaultAddr)
		}
		if g.SharedGroup && addr.Bus == 0 {
			return fmt.Errorf("gpus[%d].sharedGroup: %s sits on the host bridge (bus 0): there is no root port to share an IOMMU group with", i, addr)
		}
		if addr.Function != 0 {
			return fmt.Errorf("gpus[%d].address: %s is not function 0 (a GPU PF sits at DDDD:BB:DD.0)", i, addr)
		}
		if j, dup := seenAddr[addr]; dup {
			return fmt.Errorf("gpus[%d].address: duplicate address %s (also gpus[%d])", i, addr, j)
		}
		seenAddr[addr] = i
		for _, f := range m.functions {
			fa := addr
			fa.Function = f.fn
			seenAddr[fa] = i
		}
		if g.Driver != "" && g.Driver != DriverNone {
			allowed := append(append(append([]string(nil), m.modules...), m.altDrivers...), DrvVFIOPCI, DrvPCIStub)
			if !contains(driverNames(), g.Driver) {
				return fmt.Errorf("gpus[%d].driver: unknown driver %q (allowed for %s: \"\" for the default %s, %s, %s)",
					i, g.Driver, g.Model, m.driver, DriverNone, strings.Join(allowed, ", "))
			}
			if !contains(allowed, g.Driver) {
				return fmt.Errorf("gpus[%d].driver: %s cannot drive model %s (allowed: \"\" for the default %s, %s, %s)",
					i, g.Driver, g.Model, m.driver, DriverNone, strings.Join(allowed, ", "))
			}
		}
	}
	if err := h.validateNVIDIA(); err != nil {
		return err
	}
	// VF ranges must not land on another device.
	for i, g := range h.GPUs {
		m, _ := lookupModel(g.Model)
		if m.virtual || m.sriov == nil {
			continue
		}
		pf := h.gpuAddress(i)
		for n := 0; n < m.sriov.total; n++ {
			vf, ok := vfAddress(pf, m.sriov, n)
			if !ok {
				return fmt.Errorf("gpus[%d].address: %s leaves no room for its %d VFs", i, pf, m.sriov.total)
			}
			if j, clash := seenAddr[vf]; clash {
				return fmt.Errorf("gpus[%d].address: VF %d of %s would be %s, the address of gpus[%d]", i, n, pf, vf, j)
			}
		}
	}
	return nil
}

func (h Host) numaNodes() int {
	if h.NUMANodes <= 0 {
		return 1
	}
	return h.NUMANodes
}

// gpuAddress is the effective address of gpus[i] (model default applied).
func (h Host) gpuAddress(i int) pci.Address {
	g := h.GPUs[i]
	if g.Address.IsZero() {
		if m, ok := lookupModel(g.Model); ok && m.defaultAddr != "" {
			return pci.MustParseAddress(m.defaultAddr)
		}
	}
	return g.Address
}

// vfAddress computes VF n's address the way the kernel derives routing IDs:
// PF RID + offset + n*stride, carrying into the device and bus numbers.
func vfAddress(pf pci.Address, s *sriovDef, n int) (pci.Address, bool) {
	rid := int(pf.Bus)<<8 | int(pf.Device)<<3 | int(pf.Function)
	rid += s.offset + n*s.stride
	if rid > 0xffff {
		return pci.Address{}, false
	}
	return pci.Address{Domain: pf.Domain, Bus: uint8(rid >> 8), Device: uint8(rid>>3) & 0x1f, Function: uint8(rid) & 7}, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
