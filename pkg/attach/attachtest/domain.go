//go:build cgo

package attachtest

import (
	"fmt"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/attach"
	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/virt"
)

// TestURI is libvirt's in-process mock driver; its state lives while a
// connection to it is open, so each test holds one.
const TestURI = "test:///default"

// testDomain has an admin's own passthrough device (0000:41:00.0) and a
// VNC password, neither of which vgpu may touch.
const testDomain = `<domain type='test'>
  <name>%s</name>
  <uuid>%s</uuid>
  <memory unit='KiB'>1048576</memory>
  <os><type arch='x86_64'>hvm</type></os>
  <devices>
    <graphics type='vnc' port='-1' passwd='s3cret'/>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source><address domain='0x0000' bus='0x41' slot='0x00' function='0x0'/></source>
    </hostdev>
  </devices>
</domain>`

// Define connects to TestURI for the test's duration and defines a fresh
// domain name (uuid) there, which must not exist yet: the test driver's
// state outlives a test only while another connection is open.
func Define(t *testing.T, name, uuid string) *virt.Conn {
	t.Helper()
	conn, err := virt.Connect(TestURI)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if d, err := conn.LookupDomain(name); err == nil {
		_ = d.Close()
		t.Fatalf("%s exists already: a connection to %s leaked from another test", name, TestURI)
	}
	d, err := conn.Define(fmt.Appendf(nil, testDomain, name, uuid))
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Close()
	return conn
}

// Failing wraps a domain to fail one step.
type Failing struct {
	attach.Domain
	SetRequestErr error
}

// SetRequest fails with SetRequestErr when it is set.
func (f Failing) SetRequest(r *domxml.Request, a virt.Affect) error {
	if f.SetRequestErr != nil {
		return f.SetRequestErr
	}
	return f.Domain.SetRequest(r, a)
}
