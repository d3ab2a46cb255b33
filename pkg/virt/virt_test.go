//go:build cgo

package virt

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
	"github.com/vgpu-project/vgpu/pkg/virt/virttest"
)

type fixture struct {
	t    *testing.T
	conn *Conn
	dom  *Domain
}

// newFixture connects to the test driver and defines a domain of the
// test's own, undefined at the end.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	c, err := Connect(virttest.URI)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ReplaceAll(t.Name(), "/", "-")
	d, err := c.Define([]byte(virttest.Domain(name, uuidFor(name))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ok, _ := d.Active(); ok {
			_ = d.d.Destroy()
		}
		_ = d.d.Undefine()
		_ = d.Close()
		_ = c.Close()
	})
	return &fixture{t: t, conn: c, dom: d}
}

// uuidFor gives every test its own domain UUID.
func uuidFor(name string) string {
	var h uint64 = 14695981039346656037
	for _, c := range []byte(name) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", uint32(h), h&0xffffffffffff)
}

func (f *fixture) parsed(which Affect) libvirtxml.Domain {
	f.t.Helper()
	x, err := f.dom.XML(which)
	if err != nil {
		f.t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(string(x)); err != nil {
		f.t.Fatal(err)
	}
	return d
}

// ours lists the vGPUs the hostdevs of d carry, the admin's one excluded.
func ours(d libvirtxml.Domain) []string {
	var out []string
	for i, h := range d.Devices.Hostdevs {
		v, ok := domxml.VGPUOfHostdev(h, i, vgpu.KindVF)
		if ok && v.ID() != "0000:41:00.0" {
			out = append(out, v.ID())
		}
	}
	return out
}

// TestDeviceFlags: the device calls get the bits of the metadata calls,
// which libvirt defines as equal.
func TestDeviceFlags(t *testing.T) {
	for _, tc := range []struct {
		a    Affect
		want libvirt.DomainDeviceModifyFlags
	}{
		{0, 0},
		{Config, libvirt.DOMAIN_DEVICE_MODIFY_CONFIG},
		{Live, libvirt.DOMAIN_DEVICE_MODIFY_LIVE},
		{Config | Live, libvirt.DOMAIN_DEVICE_MODIFY_CONFIG | libvirt.DOMAIN_DEVICE_MODIFY_LIVE},
	} {
		if got := tc.a.deviceFlags(); got != tc.want {
			t.Errorf("%s: device flags %#x, want %#x", tc.a, got, tc.want)
		}
	}
}

func TestLookup(t *testing.T) {
	f := newFixture(t)
	for _, key := range []string{f.dom.Name(), f.dom.UUID(), strings.ToUpper(f.dom.UUID())} {
		d, err := f.conn.LookupDomain(key)
		if err != nil {
			t.Fatalf("lookup %s: %v", key, err)
		}
		if d.Name() != f.dom.Name() || d.UUID() != f.dom.UUID() || d.URI() != virttest.URI {
			t.Fatalf("lookup %s found %s %s", key, d.Name(), d.UUID())
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := f.conn.LookupDomain("nope")
	if !errors.Is(err, ErrNoDomain) || !errors.Is(err, libvirt.ERR_NO_DOMAIN) || err.Error() != "no domain nope on test:///default" {
		t.Fatalf("unknown domain: %v", err)
	}
	// The test driver's own running domain, by id.
	d, err := f.conn.LookupDomain("1")
	if err != nil || d.Name() != "test" {
		t.Fatalf("lookup by id: %v", err)
	}
	_ = d.Close()
}

func TestConnectFails(t *testing.T) {
	_, err := Connect("nosuchdriver:///system")
	if !errors.Is(err, ErrConnect) || !strings.HasPrefix(err.Error(), "connect to libvirt at nosuchdriver:///system: ") {
		t.Fatalf("bad URI: %v", err)
	}
}

func TestAttachDetachConfig(t *testing.T) {
	f := newFixture(t)
	before := f.parsed(Config)
	mdev, err := domxml.MdevVGPU(f.dom.UUID(), 0)
	if err != nil {
		t.Fatal(err)
	}
	vfs := []domxml.VGPU{
		domxml.PCIVGPU(0, vgpu.KindVF, pci.MustParseAddress("0000:03:00.2")),
		domxml.PCIVGPU(1, vgpu.KindNVIDIAVF, pci.MustParseAddress("0000:86:01.3")),
	}
	if err := f.dom.Attach(append(vfs, mdev), Config); err != nil {
		t.Fatal(err)
	}
	after := f.parsed(Config)
	if got := ours(after); strings.Join(got, ",") != "0000:03:00.2,0000:86:01.3,"+mdev.UUID {
		t.Fatalf("hostdevs after attach: %v", got)
	}
	for _, h := range after.Devices.Hostdevs[1:] {
		if h.SubsysPCI != nil && h.Managed != "no" {
			t.Fatalf("PCI vGPU hostdev managed=%q", h.Managed)
		}
		if m := h.SubsysMDev; m != nil && (m.Model != "vfio-pci" || m.Display != "off") {
			t.Fatalf("mdev hostdev %+v", m)
		}
	}
	// The secret survived (a redefine without SECURE would drop it).
	x, err := f.dom.d.GetXMLDesc(libvirt.DOMAIN_XML_INACTIVE | libvirt.DOMAIN_XML_SECURE)
	if err != nil || !strings.Contains(x, "passwd='s3cret'") {
		t.Fatalf("VNC password lost: %v\n%s", err, x)
	}
	// Attaching one again is refused and changes nothing.
	if err := f.dom.Attach(vfs[:1], Config); err == nil {
		t.Fatal("attached the same VF twice")
	}
	if got := ours(f.parsed(Config)); len(got) != 3 {
		t.Fatalf("refused attach changed the hostdevs: %v", got)
	}

	if err := f.dom.Detach(vfs[1:], Config); err != nil {
		t.Fatal(err)
	}
	if got := ours(f.parsed(Config)); strings.Join(got, ",") != "0000:03:00.2,"+mdev.UUID {
		t.Fatalf("hostdevs after detach: %v", got)
	}
	// Detach is repeatable.
	if err := f.dom.Detach(append(vfs, mdev), Config); err != nil {
		t.Fatal(err)
	}
	if err := f.dom.Detach(append(vfs, mdev), Config); err != nil {
		t.Fatalf("second detach: %v", err)
	}
	// Back where we started, to libvirt's eye.
	b, _ := before.Marshal()
	now := f.parsed(Config)
	a, _ := now.Marshal()
	if a != b {
		t.Fatalf("attach+detach changed the domain:\n--- before\n%s\n--- after\n%s", b, a)
	}
}

func TestSetRequest(t *testing.T) {
	f := newFixture(t)
	r := domxml.Request{Profile: "mi25-4g", Count: 1, VGPUs: []domxml.VGPU{
		domxml.PCIVGPU(0, vgpu.KindVF, pci.MustParseAddress("0000:03:00.2"))}}
	if err := f.dom.Attach(r.VGPUs, Config); err != nil {
		t.Fatal(err)
	}
	if err := f.dom.SetRequest(&r, Config); err != nil {
		t.Fatal(err)
	}
	x, err := f.dom.XML(Config)
	if err != nil {
		t.Fatal(err)
	}
	d, err := domxml.Parse(x)
	if err != nil || d.Request == nil || !d.Request.Equal(r) || len(d.Hostdevs) != 1 || d.UUID != f.dom.UUID() {
		t.Fatalf("parsed back %+v, %v\n%s", d, err, x)
	}
	if !strings.Contains(string(x), `<vgpu:request xmlns:vgpu="`+domxml.Namespace+`"`) {
		t.Fatalf("libvirt stored our element under another prefix:\n%s", x)
	}

	// Live and config of a running domain; then config only.
	if err := f.dom.d.Create(); err != nil {
		t.Fatal(err)
	}
	r.Count, r.VGPUs = 1, nil
	if err := f.dom.SetRequest(&r, Config|Live); err != nil {
		t.Fatal(err)
	}
	for _, which := range []Affect{Config, Live} {
		x, _ := f.dom.XML(which)
		if d, err := domxml.Parse(x); err != nil || d.Request == nil || !d.Request.Equal(r) {
			t.Fatalf("%s: %+v %v", which, d.Request, err)
		}
	}
	if err := f.dom.SetRequest(nil, Config); err != nil {
		t.Fatal(err)
	}
	xc, _ := f.dom.XML(Config)
	xl, _ := f.dom.XML(Live)
	if domxml.MayHaveRequest(xc) || !domxml.MayHaveRequest(xl) {
		t.Fatalf("removing from the config only:\nconfig:\n%s\nlive:\n%s", xc, xl)
	}
	if err := f.dom.SetRequest(&domxml.Request{Profile: "BAD"}, Config); !errors.Is(err, domxml.ErrInvalid) {
		t.Fatalf("invalid request: %v", err)
	}
}

func TestLiveChanges(t *testing.T) {
	f := newFixture(t)
	v := domxml.PCIVGPU(0, vgpu.KindVF, pci.MustParseAddress("0000:03:00.2"))
	// A stopped domain has nothing live to change.
	err := f.dom.SetRequest(&domxml.Request{Profile: "mi25-4g", Count: 1}, Live)
	if !errors.Is(err, ErrInvalidState) || !strings.Contains(err.Error(), "(live) on test:///default: ") {
		t.Fatalf("live metadata on a stopped domain: %v", err)
	}
	if err := f.dom.d.Create(); err != nil {
		t.Fatal(err)
	}
	// Hotplug: libvirt 9.0's test driver has none; newer ones do.
	err = f.dom.Attach([]domxml.VGPU{v}, Live)
	switch {
	case errors.Is(err, ErrUnsupported):
		if !strings.Contains(err.Error(), "attach the hostdev of vf 0000:03:00.2 to TestLiveChanges (live) on test:///default: ") {
			t.Fatalf("message: %v", err)
		}
	case err == nil:
		if got := ours(f.parsed(Live)); len(got) != 1 {
			t.Fatalf("live hostdevs after hotplug: %v", got)
		}
		if got := ours(f.parsed(Config)); len(got) != 0 {
			t.Fatalf("a live attach changed the config: %v", got)
		}
	default:
		t.Fatal(err)
	}
}

func TestTransientHasNoConfig(t *testing.T) {
	c, err := Connect(virttest.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ld, err := c.c.DomainCreateXML(virttest.Domain("transient", uuidFor("transient")), 0)
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.domain(ld)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.d.Destroy(); _ = d.Close() }()
	err = d.Attach([]domxml.VGPU{domxml.PCIVGPU(0, vgpu.KindVF, pci.MustParseAddress("0000:03:00.2"))}, Config)
	if !errors.Is(err, ErrInvalidState) {
		t.Fatalf("config attach to a transient domain: %v", err)
	}
}

// ListDomains: the defined domain (shut off, persistent XML) and the test
// driver's own running one (live XML), by name.
func TestListDomains(t *testing.T) {
	f := newFixture(t)
	ds, err := f.conn.ListDomains()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range ds {
		names = append(names, d.Name)
		switch d.Name {
		case f.dom.Name():
			if d.Active || d.UUID != f.dom.UUID() || !strings.Contains(string(d.XML), "bus='0x41'") {
				t.Errorf("defined domain: %+v", d)
			}
		case "test":
			if !d.Active || !strings.Contains(string(d.XML), "<domain type='test' id='1'>") {
				t.Errorf("running domain: active %v, XML %.80s", d.Active, d.XML)
			}
		}
	}
	if !slices.Contains(names, f.dom.Name()) || !slices.Contains(names, "test") || !slices.IsSorted(names) {
		t.Errorf("domains %v: want %s and test, sorted", names, f.dom.Name())
	}
}
