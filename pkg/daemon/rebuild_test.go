package daemon

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// domainXML is a domain as libvirt returns it, with vgpu's request naming
// vs and a hostdev for each.
func domainXML(t *testing.T, uuid, name, prof string, vs ...domxml.VGPU) []byte {
	t.Helper()
	r := domxml.Request{Profile: prof, Count: len(vs), VGPUs: vs}
	var devs strings.Builder
	for _, v := range vs {
		h, err := domxml.HostdevXML(v)
		if err != nil {
			t.Fatal(err)
		}
		devs.WriteString(h)
	}
	return fmt.Appendf(nil, "<domain type='kvm'><name>%s</name><uuid>%s</uuid><metadata>%s</metadata><devices>%s</devices></domain>",
		name, uuid, r.XML(), devs.String())
}

func requestVGPU(t *testing.T, i int, a api.Allocation) domxml.VGPU {
	t.Helper()
	if vgpu.Kind(a.Kind) == vgpu.KindMdev {
		return domxml.VGPU{Index: i, Kind: vgpu.Kind(a.Kind), UUID: a.VGPU}
	}
	return domxml.VGPU{Index: i, Kind: vgpu.Kind(a.Kind), Address: pci.MustParseAddress(a.VGPU)}
}

// TestRebuild: a ledger rebuilt from the host and libvirt's domains holds
// what the lost one held: the GPUs carved for the config, and each
// domain's vGPUs, attached for a running domain, reserved for a shut-off
// one. What it cannot know is said, never guessed: XML that does not
// parse, a vGPU two domains name (the running one keeps it), a vGPU that
// is gone, a VFIO user no domain explains.
func TestRebuild(t *testing.T) {
	r := startMixed(t)
	e := r.d.engine
	doms := []struct{ uuid, name, profile string }{{domA, "web01", "t4-4q"}, {domB, "db01", "mi25-4g"}, {domC, "gpu01", "l40s-12q"}}
	got := map[string][]api.Allocation{}
	for _, d := range doms {
		h, err := r.c.Reserve(bg, d.uuid, api.ReserveRequest{Name: d.name, Profile: d.profile, Count: 2})
		if err != nil {
			t.Fatal(err)
		}
		got[d.uuid] = h.Allocations
	}
	// web01 runs.
	var ids []string
	for _, a := range got[domA] {
		ids = append(ids, a.VGPU)
	}
	if _, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "t4-4q", VGPUs: ids}); err != nil {
		t.Fatal(err)
	}
	want, err := e.Ledger().Allocations()
	if err != nil {
		t.Fatal(err)
	}
	wantCarved, err := e.Ledger().CarvedGPUs()
	if err != nil {
		t.Fatal(err)
	}

	// A QEMU nobody defined holds a free mi25-4g VF.
	vs, err := r.c.VGPUs(bg)
	if err != nil {
		t.Fatal(err)
	}
	var stray string
	for _, v := range vs {
		if v.Profile == "mi25-4g" && v.State == api.StateFree {
			stray = v.ID
			break
		}
	}
	g, _, err := pci.IOMMUGroup(r.k, pci.MustParseAddress(stray))
	if err != nil {
		t.Fatal(err)
	}
	qemu, err := r.k.Open(pci.GroupDevicePath(g))
	if err != nil {
		t.Fatal(err)
	}
	defer qemu.Close()

	var known []engine.KnownDomain
	for i, d := range doms {
		var rv []domxml.VGPU
		for j, a := range got[d.uuid] {
			rv = append(rv, requestVGPU(t, j, a))
		}
		known = append(known, engine.KnownDomain{UUID: d.uuid, Name: d.name, Active: i == 0, XML: domainXML(t, d.uuid, d.name, d.profile, rv...)})
	}
	// A shut-off copy of web01 names its first vGPU, and an mdev made only
	// at its start (it held nothing); a running domain names a VF that is gone.
	later := domxml.VGPU{Index: 1, Kind: vgpu.KindMdev, UUID: "77777777-1111-4222-8333-444444444444"}
	gone := domxml.VGPU{Index: 0, Kind: vgpu.KindVF, Address: pci.MustParseAddress("0000:03:07.7")}
	known = append(known,
		engine.KnownDomain{UUID: "0f0f0f0f-1111-4222-8333-444444444444", Name: "web01-clone", XML: domainXML(t, "0f0f0f0f-1111-4222-8333-444444444444", "web01-clone", "t4-4q", requestVGPU(t, 0, got[domA][0]), later)},
		engine.KnownDomain{UUID: "0c0c0c0c-1111-4222-8333-444444444444", Name: "ghost", Active: true, XML: domainXML(t, "0c0c0c0c-1111-4222-8333-444444444444", "ghost", "mi25-4g", gone)},
		engine.KnownDomain{UUID: "0e0e0e0e-1111-4222-8333-444444444444", Name: "broken", XML: []byte("<domain><name>broken</name><metadata><vgpu:request xmlns:vgpu='" + domxml.Namespace + "'")},
		engine.KnownDomain{UUID: "0d0d0d0d-1111-4222-8333-444444444444", Name: "plain", Active: true, XML: []byte("<domain><name>plain</name></domain>")},
	)

	l, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ne, err := engine.NewEngine(engine.EngineOptions{FS: r.k, Ledger: l, Catalog: e.Catalog(), Config: e.Config(), LockDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ne.Rebuild(bg, known)
	if err != nil {
		t.Fatal(err)
	}
	rebuilt, err := l.Allocations()
	if err != nil {
		t.Fatal(err)
	}
	key := func(as []ledger.Allocation) []string {
		var out []string
		for _, a := range as {
			out = append(out, fmt.Sprintf("%s %s %s %s %s %s %s", a.VGPU, a.GPU, a.Parent, a.Profile, a.DomainUUID, a.DomainName, a.State))
		}
		slices.Sort(out)
		return out
	}
	if !slices.Equal(key(rebuilt), key(want)) {
		t.Errorf("rebuilt allocations:\n%s\nwant:\n%s", strings.Join(key(rebuilt), "\n"), strings.Join(key(want), "\n"))
	}
	if !slices.Equal(key(rep.Allocations), key(want)) {
		t.Errorf("report's allocations differ from the ledger's: %v", key(rep.Allocations))
	}
	carved, err := l.CarvedGPUs()
	if err != nil {
		t.Fatal(err)
	}
	ckey := func(cs []ledger.Carved) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.GPU.String()+" "+c.Parent+" "+c.Profile)
		}
		slices.Sort(out)
		return out
	}
	if len(wantCarved) == 0 || !slices.Equal(ckey(carved), ckey(wantCarved)) {
		t.Errorf("rebuilt carved GPUs %v, want %v", ckey(carved), ckey(wantCarved))
	}
	notes := strings.Join(rep.Notes, "\n")
	for _, w := range []string{
		"domain broken (0e0e0e0e-1111-4222-8333-444444444444): its XML does not parse",
		"vGPU " + got[domA][0].VGPU + " is named by domain web01 (" + domA + ") and by domain web01-clone",
		"domain ghost (0c0c0c0c-1111-4222-8333-444444444444) names vGPU 0000:03:07.7, which is not on this host",
		"vGPU " + stray + " (mi25-4g) is open by",
	} {
		if !strings.Contains(notes, w) {
			t.Errorf("notes lack %q:\n%s", w, notes)
		}
	}
	if len(rep.Notes) != 4 {
		t.Errorf("%d notes, want 4:\n%s", len(rep.Notes), notes)
	}

	// Rebuild writes only into an empty ledger.
	if _, err := ne.Rebuild(bg, known); !errors.Is(err, engine.ErrLedgerNotEmpty) {
		t.Errorf("second rebuild: %v, want %v", err, engine.ErrLedgerNotEmpty)
	}
}
