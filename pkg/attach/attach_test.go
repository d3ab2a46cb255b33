//go:build cgo

package attach_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/attach"
	"github.com/vgpu-project/vgpu/pkg/attach/attachtest"
	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
	"github.com/vgpu-project/vgpu/pkg/virt"
)

const testUUID = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"

// configXML is libvirt's own persistent definition of the domain.
func configXML(t *testing.T, conn *virt.Conn, name string) []byte {
	t.Helper()
	d, err := conn.LookupDomain(name)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	x, err := d.XML(virt.Config)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestAttachUndoesHostdevs(t *testing.T) {
	res := attachtest.NewReserver()
	conn := attachtest.Define(t, "web01", testUUID)
	before := configXML(t, conn, "web01")
	d, err := conn.LookupDomain("web01")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	boom := errors.New("metadata write failed")
	_, err = attach.Attach(context.Background(), attachtest.Failing{Domain: d, SetRequestErr: boom}, res,
		attach.Spec{Profile: "mi25-4g", Kind: vgpu.KindVF, Count: 2, Affect: virt.Config})
	if !errors.Is(err, boom) || errors.Is(err, attach.ErrUndo) {
		t.Fatalf("error %v, want the cause alone: every undo succeeded", err)
	}
	if after := configXML(t, conn, "web01"); !bytes.Equal(before, after) {
		t.Fatalf("the hostdevs of a failed attach stayed:\n%s", after)
	}
	if got := res.Held[testUUID]; len(got) != 0 {
		t.Fatalf("reservations left: %v", got)
	}
}

// undoFails is a domain whose SetRequest and Detach fail, and a reserver
// whose Release fails: every undo of the attach fails.
type undoFails struct {
	attachtest.Failing
	detachErr error
}

func (u undoFails) Detach([]domxml.VGPU, virt.Affect) error { return u.detachErr }

type releaseFails struct {
	*attachtest.Reserver
	err error
}

func (r releaseFails) Release(_ context.Context, _ string, ids []string) ([]string, error) {
	r.Calls = append(r.Calls, "release "+strings.Join(ids, ","))
	return nil, r.err
}

func TestAttachReportsEachUndoThatFailed(t *testing.T) {
	conn := attachtest.Define(t, "web01", testUUID)
	d, err := conn.LookupDomain("web01")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	boom := errors.New("metadata write failed")
	detachErr := errors.New("domain is locked")
	releaseErr := errors.New("vgpud went away")
	res := releaseFails{attachtest.NewReserver(), releaseErr}
	_, err = attach.Attach(context.Background(), undoFails{attachtest.Failing{Domain: d, SetRequestErr: boom}, detachErr}, res,
		attach.Spec{Profile: "mi25-4g", Kind: vgpu.KindVF, Count: 2, Affect: virt.Config})
	want := "metadata write failed; detaching the new hostdevs failed too: domain is locked; " +
		"releasing 0000:03:00.1, 0000:03:00.2 in vgpud failed too: vgpud went away " +
		"(left partly done: vgpuctl detach web01 VGPU releases a vGPU named here; virsh edit web01 removes a hostdev left in the definition)"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v\nwant  %s", err, want)
	}
	for _, e := range []error{boom, detachErr, releaseErr, attach.ErrUndo} {
		if !errors.Is(err, e) {
			t.Errorf("the error does not wrap %v", e)
		}
	}
}
