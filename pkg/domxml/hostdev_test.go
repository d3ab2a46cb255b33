package domxml

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

const web01 = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"

func mustMdev(t *testing.T, domainUUID string, i int) VGPU {
	t.Helper()
	v, err := MdevVGPU(domainUUID, i)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestHostdevGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    VGPU
		typ  string
	}{
		{"vf", PCIVGPU(0, vgpu.KindVF, pci.MustParseAddress("0000:03:00.2")), "pci"},
		{"nvidia-vf", PCIVGPU(1, vgpu.KindNVIDIAVF, pci.MustParseAddress("0000:86:01.3")), "pci"},
		{"pf", PCIVGPU(0, vgpu.KindPF, pci.MustParseAddress("0001:41:00.0")), "pci"},
		{"mdev", mustMdev(t, web01, 0), "mdev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, err := HostdevXML(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "hostdev-"+tc.name+".xml", []byte(x+"\n"))
			// The golden file is what libvirt gets: read it back as libvirt's schema.
			var h libvirtxml.DomainHostdev
			if err := h.Unmarshal(string(fixture(t, "hostdev-"+tc.name+".xml"))); err != nil {
				t.Fatal(err)
			}
			got, ok := VGPUOfHostdev(h, tc.v.Index, tc.v.Kind)
			if !ok || got != tc.v {
				t.Fatalf("read back %+v (ok %v), want %+v", got, ok, tc.v)
			}
			switch tc.typ {
			case "pci":
				if h.Managed != "no" || h.SubsysPCI == nil || h.SubsysMDev != nil {
					t.Fatalf("PCI hostdev: managed %q, %+v", h.Managed, h)
				}
			case "mdev":
				m := h.SubsysMDev
				if m == nil || m.Model != "vfio-pci" || m.Display != "off" || h.SubsysPCI != nil {
					t.Fatalf("mdev hostdev: %+v", h)
				}
			}
		})
	}
}

func TestHostdevRefusesBadVGPU(t *testing.T) {
	for _, v := range []VGPU{
		{Kind: "gpu", Address: pci.MustParseAddress("0000:03:00.2")},
		{Kind: vgpu.KindMdev, UUID: "not-a-uuid"},
		{Kind: vgpu.KindVF, Index: MaxCount},
	} {
		if _, err := HostdevXML(v); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", v, err)
		}
	}
}

func TestVGPUOfHostdevIgnoresOtherHostdevs(t *testing.T) {
	usb := libvirtxml.DomainHostdev{SubsysUSB: &libvirtxml.DomainHostdevSubsysUSB{}}
	if _, ok := VGPUOfHostdev(usb, 0, vgpu.KindVF); ok {
		t.Fatal("a USB hostdev read as a vGPU")
	}
	if _, ok := VGPUOfHostdev(libvirtxml.DomainHostdev{SubsysPCI: &libvirtxml.DomainHostdevSubsysPCI{}}, 0, vgpu.KindVF); ok {
		t.Fatal("a PCI hostdev without a source read as a vGPU")
	}
}

func TestMdevUUID(t *testing.T) {
	// Pinned: changing the derivation would orphan every mdev of every
	// running domain at its next migration.
	for _, tc := range []struct {
		domain string
		index  int
		want   string
	}{
		{web01, 0, "8ba0f263-ccc3-5181-8cb1-c925e7eda99b"},
		{"4DEA22B3-1D52-D8F3-2516-782E98AB3FA0", 1, "eef2befa-2067-531e-9662-99e8cb69fa73"},
	} {
		got, err := MdevUUID(tc.domain, tc.index)
		if err != nil || got != tc.want {
			t.Errorf("MdevUUID(%s, %d) = %s, %v; want %s", tc.domain, tc.index, got, err, tc.want)
		}
	}
	seen := map[string]bool{}
	for _, d := range []string{web01, "6695eb01-f6a4-8304-79aa-97f2502e193f"} {
		for i := range MaxCount {
			u, err := MdevUUID(d, i)
			if err != nil {
				t.Fatal(err)
			}
			if seen[u] {
				t.Fatalf("MdevUUID(%s, %d) = %s repeats", d, i, u)
			}
			seen[u] = true
			if p := uuid.MustParse(u); p.Version() != 5 || p.Variant() != uuid.RFC4122 {
				t.Fatalf("%s is not an RFC 4122 v5 UUID", u)
			}
			again, _ := MdevUUID(d, i)
			if again != u {
				t.Fatal("MdevUUID is not deterministic")
			}
		}
	}
	for _, bad := range []struct {
		d string
		i int
	}{{"web01", 0}, {web01[:35], 0}, {"{" + web01 + "}", 0}, {web01, -1}, {web01, MaxCount}} {
		if _, err := MdevUUID(bad.d, bad.i); !errors.Is(err, ErrInvalid) {
			t.Errorf("MdevUUID(%q, %d): %v, want ErrInvalid", bad.d, bad.i, err)
		}
	}
}
