package domxml

import (
	"fmt"

	"github.com/vgpu-project/vgpu/pkg/vgpu"
	"libvirt.org/go/libvirtxml"
)

// Hostdev is the hostdev that hands v to a VM:
//
//   - vf, pf and nvidia-vf: <hostdev mode='subsystem' type='pci' managed='no'>
//     with the PCI source address. managed='no' because vgpud, not libvirt,
//     owns the function's driver: a VF stays on vfio-pci (or xe-vfio-pci)
//     between VMs, and an NVIDIA per-VF vGPU stays on the vendor's (VFIO
//     variant) driver, which libvirt must not unbind; hence no <driver
//     model=.../>, which only a managed='yes' hostdev needs.
//   - mdev: <hostdev mode='subsystem' type='mdev' model='vfio-pci'
//     display='off'> with the mdev UUID; vgpud creates the mdev at VM start.
//     Display is off: the guest's vendor driver drives the display, and a
//     display='on' needs a graphics device and vendor support.
func Hostdev(v VGPU) (libvirtxml.DomainHostdev, error) {
	if _, err := ParseVGPU(v.Index, string(v.Kind), v.ID()); err != nil {
		return libvirtxml.DomainHostdev{}, err
	}
	if v.Kind == vgpu.KindMdev {
		return libvirtxml.DomainHostdev{
			SubsysMDev: &libvirtxml.DomainHostdevSubsysMDev{
				Model:   "vfio-pci",
				Display: "off",
				Source: &libvirtxml.DomainHostdevSubsysMDevSource{
					Address: &libvirtxml.DomainAddressMDev{UUID: v.UUID},
				},
			},
		}, nil
	}
	dom, bus, slot, fn := uint(v.Address.Domain), uint(v.Address.Bus), uint(v.Address.Device), uint(v.Address.Function)
	return libvirtxml.DomainHostdev{
		Managed: "no",
		SubsysPCI: &libvirtxml.DomainHostdevSubsysPCI{
			Source: &libvirtxml.DomainHostdevSubsysPCISource{
				Address: &libvirtxml.DomainAddressPCI{Domain: &dom, Bus: &bus, Slot: &slot, Function: &fn},
			},
		},
	}, nil
}

// HostdevXML is Hostdev as the XML virDomainAttachDeviceFlags takes.
func HostdevXML(v VGPU) (string, error) {
	h, err := Hostdev(v)
	if err != nil {
		return "", err
	}
	s, err := h.Marshal()
	if err != nil {
		return "", fmt.Errorf("write the hostdev of %s: %w", v, err)
	}
	return s, nil
}

// VGPUOfHostdev reads back the vGPU a hostdev carries; kind says which PCI
// kind to report (the hostdev does not say whether a function is a VF or
// an NVIDIA VF), and is ignored for an mdev. ok is false for a hostdev
// that cannot carry a vGPU (USB, SCSI, no source).
func VGPUOfHostdev(h libvirtxml.DomainHostdev, index int, kind vgpu.Kind) (v VGPU, ok bool) {
	switch {
	case h.SubsysMDev != nil && h.SubsysMDev.Source != nil && h.SubsysMDev.Source.Address != nil:
		u, err := canonicalUUID(h.SubsysMDev.Source.Address.UUID)
		return VGPU{Index: index, Kind: vgpu.KindMdev, UUID: u}, err == nil
	case h.SubsysPCI != nil && h.SubsysPCI.Source != nil && h.SubsysPCI.Source.Address != nil:
		a := h.SubsysPCI.Source.Address
		if a.Bus == nil || a.Slot == nil || a.Function == nil {
			return VGPU{}, false
		}
		s := func(p *uint) string {
			if p == nil {
				return ""
			}
			return fmt.Sprint(*p)
		}
		addr, err := pciAddress(s(a.Domain), s(a.Bus), s(a.Slot), s(a.Function))
		if kind == vgpu.KindMdev || kind == "" {
			kind = vgpu.KindVF
		}
		return VGPU{Index: index, Kind: kind, Address: addr}, err == nil
	}
	return VGPU{}, false
}
