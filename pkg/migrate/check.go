package migrate

import (
	"fmt"
	"strings"
)

// Minimum versions for VFIO device migration (docs/migration.md,
// "Requirements": libvirt 8.6.0, QEMU 8.1.0), as libvirt numbers them (major*1e6 + minor*1e3 + micro).
const (
	MinLibvirt = 8006000
	MinQEMU    = 8001000
)

// End is one host of a migration.
type End struct {
	URI, Hostname, UUID string
	Libvirt, QEMU       uint32
}

// Hostdev is one hostdev of the domain, classified.
type Hostdev struct {
	// ID is its source: a PCI address or an mdev UUID.
	ID string
	// VGPU: vgpu manages it (the request names it).
	VGPU bool
	// Kind is the vGPU's kind (vf, mdev, nvidia-vf, pf), "" for others.
	Kind string
	// Migration is how its model migrates (the catalog); nil: it does not.
	Migration *Device
	// Model names the GPU model, for messages.
	Model string
	// Driver is the source's driver of the vGPU's device ("" unknown).
	Driver string
}

// Facts are what the checks look at, gathered before anything moves.
type Facts struct {
	Domain   string
	Active   bool
	Src, Dst End
	Hostdevs []Hostdev
	// VIOMMU: the domain has an <iommu> device.
	VIOMMU bool
	// Blocked are QEMU's blocked-reasons on the source.
	Blocked []string
}

// Check returns every reason the domain cannot migrate, each one line
// naming the domain, the device and why; none means it may.
func Check(f Facts) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("cannot migrate %s: "+format, append([]any{f.Domain}, args...)...))
	}
	if !f.Active {
		bad("it is not running (a live migration moves a running VM; virsh migrate --offline moves a definition)")
	}
	if f.Src.UUID != "" && f.Src.UUID == f.Dst.UUID {
		bad("the destination %s is this host (host UUID %s on both ends)", f.Dst.URI, f.Src.UUID)
	}
	vgpus := 0
	for _, h := range f.Hostdevs {
		switch {
		case !h.VGPU:
			bad("hostdev %s is not a vGPU vgpu manages; libvirt cannot migrate an assigned device it knows nothing about", h.ID)
		case h.Kind == "pf":
			bad("vGPU %s is a whole GPU passed through; no driver migrates a whole GPU's state", h.ID)
		case h.Migration == nil:
			bad("vGPU %s (%s) cannot migrate: its vendor driver has no VFIO migration (catalog: no migration entry for %s)", h.ID, h.Kind, h.Model)
		case h.Kind == "vf" && h.Driver == "vfio-pci":
			// vfio-pci has no migration ops; a VF migrates on its
			// vendor's variant driver (Intel xe: xe-vfio-pci).
			bad("vGPU %s is a VF on vfio-pci, which has no VFIO migration; its variant driver must hold it (Intel xe: modprobe xe-vfio-pci on both hosts, then vgpuctl carve the GPU again)", h.ID)
		default:
			vgpus++
		}
	}
	if vgpus > 0 {
		for _, e := range []struct {
			name string
			end  End
		}{{"source", f.Src}, {"destination", f.Dst}} {
			if e.end.Libvirt != 0 && e.end.Libvirt < MinLibvirt {
				bad("the %s %s runs libvirt %s; migrating a vGPU needs libvirt 8.6.0 or later", e.name, e.end.URI, version(e.end.Libvirt))
			}
			if e.end.QEMU != 0 && e.end.QEMU < MinQEMU {
				bad("the %s %s runs QEMU %s; migrating a vGPU needs QEMU 8.1.0 or later", e.name, e.end.URI, version(e.end.QEMU))
			}
		}
	}
	if f.VIOMMU {
		bad("it has a virtual IOMMU; VFIO migration does not support one")
	}
	if len(f.Blocked) > 0 {
		bad("QEMU blocks it: %s", strings.Join(f.Blocked, "; "))
	}
	return errs
}

func version(v uint32) string { return fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000) }
