//go:build cgo

package virt

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// TestQEMUEmbed runs Attach and Detach through the real QEMU driver's
// virDomainAttachDeviceFlags path, in process (qemu:///embed, no daemon),
// on a stopped domain. The test driver of libvirt 9.0 lacks device attach,
// so the tests above exercise the redefine path. The embedded driver needs
// QEMU, and as root the user libvirt-qemu (Debian's libvirt-daemon-system).
func TestQEMUEmbed(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 is not installed")
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("libvirt-qemu"); err != nil {
			t.Skip("the embedded QEMU driver needs the user libvirt-qemu as root (apt-get install libvirt-daemon-system)")
		}
	}
	// The embedded driver runs its monitors on the process's libvirt event
	// loop; a test process has none until one is registered.
	if err := libvirt.EventRegisterDefaultImpl(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for libvirt.EventRunDefaultImpl() == nil {
		}
	}()
	c, err := Connect("qemu:///embed?root=" + t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	doc := `<domain type='qemu'><name>web01</name><uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid>
<memory unit='KiB'>262144</memory><os><type arch='x86_64'>hvm</type></os><devices/></domain>`
	d, err := c.Define([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	mdev, _ := domxml.MdevVGPU(d.UUID(), 0)
	vs := []domxml.VGPU{domxml.PCIVGPU(0, vgpu.KindVF, pci.MustParseAddress("0000:03:00.2")), mdev}
	if err := d.Attach(vs, Config); err != nil {
		t.Fatal(err)
	}
	r := domxml.Request{Profile: "mi25-4g", Count: 1, VGPUs: vs[:1]}
	if err := d.SetRequest(&r, Config); err != nil {
		t.Fatal(err)
	}
	x, _ := d.XML(Config)
	pd, err := domxml.Parse(x)
	if err != nil || len(pd.Hostdevs) != 1 || !strings.Contains(string(x), "uuid='"+mdev.UUID+"'") {
		t.Fatalf("after attach: %+v %v\n%s", pd, err, x)
	}
	if err := d.Attach(vs[:1], Config); err == nil {
		t.Fatal("the QEMU driver took the same VF twice")
	}
	if err := d.Detach(vs, Config); err != nil {
		t.Fatal(err)
	}
	if err := d.Detach(vs, Config); err != nil {
		t.Fatalf("second detach (device missing): %v", err)
	}
	x, _ = d.XML(Config)
	if strings.Contains(string(x), "<hostdev") {
		t.Fatalf("hostdevs left:\n%s", x)
	}
	if err := d.Attach(vs[:1], Live); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("live attach to a stopped domain: %v", err)
	}
}
