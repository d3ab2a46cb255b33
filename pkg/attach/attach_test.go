//go:build cgo

package attach_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/attach"
	"github.com/vgpu-project/vgpu/pkg/attach/attachtest"
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
	if !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
	if after := configXML(t, conn, "web01"); !bytes.Equal(before, after) {
		t.Fatalf("the hostdevs of a failed attach stayed:\n%s", after)
	}
	if got := res.Held[testUUID]; len(got) != 0 {
		t.Fatalf("reservations left: %v", got)
	}
}
