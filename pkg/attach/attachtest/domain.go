//go:build cgo

package attachtest

import (
	"testing"

	"github.com/vgpu-project/vgpu/pkg/attach"
	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/virt"
	"github.com/vgpu-project/vgpu/pkg/virt/virttest"
)

// TestURI is libvirt's in-process mock driver (virttest.URI).
const TestURI = virttest.URI

// Define connects to TestURI for the test's duration and defines a fresh
// domain name (uuid) there (virttest.Domain), which must not exist yet: the test driver's
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
	d, err := conn.Define([]byte(virttest.Domain(name, uuid)))
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
