package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// TestRebuildOwnerByTheOneRule: a rebuild records an mdev on a virtual
// parent by the parent's name, and does not record a vGPU whose owner no
// allocation may name (ledger.ParseOwner), saying why.
func TestRebuildOwnerByTheOneRule(t *testing.T) {
	const (
		good = "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44"
		bad  = "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d45"
	)
	v := &hostView{vgpus: []vgpu.VGPU{
		{ID: good, GPU: "0.0.0313", Kind: vgpu.KindMdev, Parent: "0.0.0313", Profile: "ccw-1"},
		{ID: bad, GPU: "css:0.0.0314", Kind: vgpu.KindMdev, Parent: "css:0.0.0314", Profile: "ccw-1"},
	}}
	dom := func(n int, id string) KnownDomain {
		u := fmt.Sprintf("4dea22b3-1d52-d8f3-2516-%012x", n)
		xml := fmt.Sprintf(`<domain><name>vm%d</name><uuid>%s</uuid><metadata><vgpu:request xmlns:vgpu="%s" profile="ccw-1" count="1">`+
			`<vgpu:vgpu index="0" kind="mdev" id="%s"/></vgpu:request></metadata></domain>`, n, u, domxml.Namespace, id)
		return KnownDomain{UUID: u, Name: fmt.Sprintf("vm%d", n), Active: true, XML: []byte(xml)}
	}
	var notes []string
	got := rebuildAllocations(v, []KnownDomain{dom(1, good), dom(2, bad)}, func(f string, a ...any) { notes = append(notes, fmt.Sprintf(f, a...)) })
	if len(got) != 1 || got[0].VGPU != good || got[0].Parent != "0.0.0313" || !got[0].GPU.IsZero() || got[0].State != ledger.StateAttached {
		t.Errorf("rebuilt %+v; want only %s on parent 0.0.0313", got, good)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "names vGPU "+bad+`, whose GPU or mdev parent "css:0.0.0314" no allocation can name: not reserved`) {
		t.Errorf("notes %q", notes)
	}
}
