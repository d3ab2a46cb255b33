package migrate

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	mtty := &Device{ID: "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001", Driver: "mtty"}
	ok := Facts{Domain: "web01", Active: true,
		Src:      End{URI: "qemu:///system", UUID: "a", Libvirt: 11003000, QEMU: 10000013},
		Dst:      End{URI: "qemu+tcp://b/system", UUID: "b", Libvirt: 11003000, QEMU: 10000013},
		Hostdevs: []Hostdev{{ID: mtty.ID, VGPU: true, Kind: "mdev", Migration: mtty, Model: "mtty"}}}
	if errs := Check(ok); len(errs) != 0 {
		t.Fatalf("a migratable domain: %v", errs)
	}
	for _, c := range []struct {
		name string
		edit func(*Facts)
		want string
	}{
		{"stopped", func(f *Facts) { f.Active = false }, "cannot migrate web01: it is not running"},
		{"same host", func(f *Facts) { f.Dst.UUID = "a" }, "the destination qemu+tcp://b/system is this host (host UUID a on both ends)"},
		{"foreign hostdev", func(f *Facts) { f.Hostdevs = append(f.Hostdevs, Hostdev{ID: "0000:05:00.0"}) }, "hostdev 0000:05:00.0 is not a vGPU vgpu manages"},
		{"passthrough", func(f *Facts) { f.Hostdevs[0] = Hostdev{ID: "0000:41:00.0", VGPU: true, Kind: "pf"} }, "vGPU 0000:41:00.0 is a whole GPU passed through"},
		{"no driver support", func(f *Facts) {
			f.Hostdevs[0] = Hostdev{ID: "0000:03:00.1", VGPU: true, Kind: "vf", Model: "AMD Radeon Instinct MI25"}
		}, "vGPU 0000:03:00.1 (vf) cannot migrate: its vendor driver has no VFIO migration (catalog: no migration entry for AMD Radeon Instinct MI25)"},
		{"xe VF on vfio-pci", func(f *Facts) {
			f.Hostdevs[0] = Hostdev{ID: "0000:05:00.1", VGPU: true, Kind: "vf", Model: "Intel Arc Pro B50", Driver: "vfio-pci", Migration: &Device{ID: "0000:05:00.1"}}
		}, "vGPU 0000:05:00.1 is a VF on vfio-pci, which has no VFIO migration; its variant driver must hold it (Intel xe: modprobe xe-vfio-pci"},
		{"old QEMU", func(f *Facts) { f.Dst.QEMU = 7002000 }, "the destination qemu+tcp://b/system runs QEMU 7.2.0; migrating a vGPU needs QEMU 8.1.0 or later"},
		{"old libvirt", func(f *Facts) { f.Src.Libvirt = 8005000 }, "the source qemu:///system runs libvirt 8.5.0; migrating a vGPU needs libvirt 8.6.0"},
		{"vIOMMU", func(f *Facts) { f.VIOMMU = true }, "it has a virtual IOMMU"},
		{"blocked", func(f *Facts) { f.Blocked = []string{"VFIO device doesn't support migration"} }, "QEMU blocks it: VFIO device doesn't support migration"},
	} {
		f := ok
		f.Hostdevs = append([]Hostdev(nil), ok.Hostdevs...)
		c.edit(&f)
		errs := Check(f)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("%s: %v; want one error with %q", c.name, errs, c.want)
		}
	}
	// The same VF on xe-vfio-pci migrates.
	xeVF := ok
	xeVF.Hostdevs = []Hostdev{{ID: "0000:05:00.1", VGPU: true, Kind: "vf", Model: "Intel Arc Pro B50", Driver: "xe-vfio-pci", Migration: &Device{ID: "0000:05:00.1"}}}
	if errs := Check(xeVF); len(errs) != 0 {
		t.Fatalf("an xe VF on xe-vfio-pci: %v", errs)
	}
	// Old versions do not matter to a domain without vGPUs.
	plain := ok
	plain.Hostdevs, plain.Src.QEMU = nil, 7002000
	if errs := Check(plain); len(errs) != 0 {
		t.Fatalf("a plain domain on QEMU 7.2: %v", errs)
	}
}
