package inventory

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// ReasonNoIOMMU is why a GPU without an IOMMU group cannot be passed
// through, nor its VFs given to VMs: VFIO needs the IOMMU.
const ReasonNoIOMMU = "no IOMMU group: enable the IOMMU (intel_iommu=on or amd_iommu=on on the kernel command line; in a VM, a vIOMMU)"

// NVIDIADriver is the nvidia module a host runs.
type NVIDIADriver struct {
	// Version is the module's ("580.159.04"); "" when it does not say.
	Version string `json:"version"`
	// VGPUHost: NVIDIA's vGPU host driver, the vGPU Manager, whose module
	// nvidia_vgpu_vfio is loaded. Without it (the datacenter driver, a
	// guest's driver) a GPU has no vGPUs: passthrough and MIG only.
	VGPUHost bool `json:"vgpuHost"`
}

// String names the driver: "NVIDIA vGPU host driver 550.54.10",
// "NVIDIA datacenter driver 580.159.04".
func (d NVIDIADriver) String() string {
	kind := "NVIDIA datacenter driver"
	if d.VGPUHost {
		kind = "NVIDIA vGPU host driver"
	}
	if d.Version == "" {
		return kind
	}
	return kind + " " + d.Version
}

// notVGPUHost is why NVIDIA's vGPU dialects are not on offer under d (nil:
// no nvidia module); "" when d is the vGPU host driver.
func notVGPUHost(d *NVIDIADriver) string {
	switch {
	case d == nil:
		return "the nvidia module is not loaded, so neither is NVIDIA's vGPU host driver"
	case d.VGPUHost:
		return ""
	}
	return d.String() + ", not the vGPU host driver (its module nvidia_vgpu_vfio is not loaded): passthrough and bare-metal MIG only"
}

// noSRIOV is why a GPU shows no SR-IOV capability: a hypervisor hides it
// from its guests; on bare metal the firmware leaves it off.
func noSRIOV(g GPU) string {
	if g.Guest != "" {
		return fmt.Sprintf("no SR-IOV capability: this OS is a guest (%s), and a GPU passed through to a VM has none", g.Guest)
	}
	return "no SR-IOV capability: SR-IOV off in firmware (turn on SR-IOV, and on AMD hosts ARI, in the system's firmware setup)"
}

// WhyNot says why g cannot be carved in dialect d on this host now, ""
// when nothing of the host stands in its way: the IOMMU, the SR-IOV
// capability and, for NVIDIA's vGPU dialects, the vGPU host driver.
// Whether the GPU has the types a profile wants is the resolver's to say.
func WhyNot(g GPU, d Dialect) string {
	var why []string
	nvidia := g.VendorID == VendorNVIDIA
	switch d {
	case DialectPassthrough:
		if g.IOMMUGroup < 0 {
			why = append(why, ReasonNoIOMMU)
		}
	case DialectSRIOV, DialectSRIOVMdev, DialectNVIDIAVF:
		if g.SRIOV == nil {
			why = append(why, noSRIOV(g))
		}
		if nvidia {
			if r := notVGPUHost(g.NVIDIADriver); r != "" {
				why = append(why, r)
			}
		}
		// VFIO takes no VF without the IOMMU; NVIDIA's vGPU host driver
		// refuses to probe a VF then (nv-pci.c: "IOMMU is not present").
		if g.IOMMUGroup < 0 && g.SRIOV != nil {
			why = append(why, ReasonNoIOMMU)
		}
	case DialectMdev:
		if nvidia {
			why = append(why, notVGPUHost(g.NVIDIADriver))
		}
	}
	return strings.Join(slices.DeleteFunc(why, func(s string) bool { return s == "" }), "; ")
}

// qemuSubsystem is the subsystem id QEMU gives the hardware it emulates
// (vendor 1af4 Red Hat/Qumranet, device 1100: QEMU's docs/specs/pci-ids):
// a host bridge showing it is a QEMU (KVM) guest's.
const (
	qemuSubVendor = 0x1af4
	qemuSubDevice = 0x1100
)

// readGuest says what shows this OS to run in a VM: "" on bare metal, or
// when the PCI topology does not say.
func readGuest(f sysfs.FS) (string, error) {
	// x86 hosts, and QEMU's i440FX and Q35 machines, put their host
	// bridge at 0000:00:00.0.
	hostBridge := pci.Address{}
	ok, err := pci.Exists(f, hostBridge)
	if err != nil || !ok {
		return "", err
	}
	dir := pci.DevicePath(hostBridge)
	var ids [2]uint64
	for i, attr := range []string{"subsystem_vendor", "subsystem_device"} {
		v, err := sysfs.ReadUint(f, dir+"/"+attr, 16)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil // gone while we looked: it says nothing
		}
		if err != nil {
			return "", fmt.Errorf("read the host bridge's %s: %w", attr, err)
		}
		ids[i] = v
	}
	v, d := ids[0], ids[1]
	if v == qemuSubVendor && d == qemuSubDevice {
		return fmt.Sprintf("its PCI host bridge %s is QEMU's, subsystem %04x:%04x", hostBridge, v, d), nil
	}
	return "", nil
}

// readBootVGA reads boot_vga, which the kernel shows on VGA-class
// functions only (pci-sysfs.c): false where it is absent.
func readBootVGA(f sysfs.FS, a pci.Address) (bool, error) {
	p := pci.DevicePath(a) + "/boot_vga"
	ok, err := sysfs.Exists(f, p)
	if err != nil || !ok {
		return false, err
	}
	v, err := sysfs.ReadUint(f, p, 8)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", p, err)
	}
	return v == 1, nil
}

// SetGuest records what shows this OS to be a guest (NVML's word, where
// the PCI topology said nothing) and words g's reasons anew.
func (g *GPU) SetGuest(why string) {
	g.Guest = why
	for i, u := range g.Unavailable {
		g.Unavailable[i].Reason = WhyNot(*g, u.Dialect)
	}
}
