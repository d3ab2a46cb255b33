package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/daemon/daemontest"
	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/engine/enginetest"
	"github.com/vgpu-project/vgpu/pkg/hook"
	"github.com/vgpu-project/vgpu/pkg/mdev"
)

const (
	cfgMixed = enginetest.MixedMI25T4Config
	// The fixtures' domain, and a second one for the VF fixture.
	web01 = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
	db01  = "8f5b7e2a-0c1d-4e3f-9a8b-7c6d5e4f3a2b"
)

// host is a vgpud running in process on a simulated mixed host, and the
// hook's agent of it.
type host struct {
	k *simkernel.Kernel
	v *daemontest.Server
	a *agent
}

func startHost(t *testing.T, yaml string) *host {
	t.Helper()
	k := simkernel.NewExample(t, "mixed.yaml")
	v := daemontest.Start(t, k, yaml)
	return &host{k: k, v: v, a: newAgent(v.Socket)}
}

// hookRun runs the hook as libvirt does, with this host's agent.
func (h *host) hookRun(t *testing.T, doc []byte, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = hook.New(h.a).Run(context.Background(), args, bytes.NewReader(doc), &out, &errb)
	return code, out.String(), errb.String()
}

// states maps each vGPU vgpud holds to "state domainName".
func (h *host) states(t *testing.T) map[string]string { return h.v.Held(t) }

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "pkg", "hook", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAgentMdev(t *testing.T) {
	h := startHost(t, cfgMixed)
	doc := fixture(t, "domain-mdev.xml")
	m0, err := domxml.MdevUUID(web01, 0)
	if err != nil || !bytes.Contains(doc, []byte(m0)) {
		t.Fatalf("the fixture's mdev is not the derived %s: %v", m0, err)
	}
	if code, out, errs := h.hookRun(t, doc, "web01", "prepare", "begin", "-"); code != 0 || out != "" || errs != "" {
		t.Fatalf("prepare: exit %d, %q, %q", code, out, errs)
	}
	if got := h.states(t); len(got) != 1 || got[m0] != "attached web01" {
		t.Fatalf("after prepare: %v", got)
	}
	if _, ok, _ := mdev.Get(h.k, m0); !ok {
		t.Fatalf("mdev %s was not created", m0)
	}
	if code, _, errs := h.hookRun(t, doc, "web01", "release", "end", "-"); code != 0 || errs != "" {
		t.Fatalf("release: exit %d, %q", code, errs)
	}
	if got := h.states(t); got[m0] != "reserved web01" {
		t.Fatalf("after release (keep): %v", got)
	}
	// virsh restore / managedsave on this host: the domain holds its mdev;
	// nothing to rewrite, nothing leased.
	if code, out, errs := h.hookRun(t, doc, "web01", "restore", "begin", "-"); code != 0 || out != "" || errs != "" {
		t.Fatalf("restore at home: exit %d, %q, %q", code, out, errs)
	}
	if got := h.states(t); len(got) != 1 || got[m0] != "reserved web01" {
		t.Fatalf("after restore begin at home: %v", got)
	}

	// Migrating to another host: one mdev leased there, the XML unchanged
	// (the UUID derives from the domain), and prepare swaps it in.
	dst := startHost(t, cfgMixed)
	if code, out, errs := dst.hookRun(t, doc, "web01", "migrate", "begin", "-"); code != 0 || out != "" || errs != "" {
		t.Fatalf("migrate begin: exit %d, %q, %q", code, out, errs)
	}
	held := dst.states(t)
	if len(held) != 1 || !strings.HasPrefix(joinValues(held), "leased web01") {
		t.Fatalf("on the destination after migrate begin: %v", held)
	}
	if code, _, errs := dst.hookRun(t, doc, "web01", "prepare", "begin", "-"); code != 0 || errs != "" {
		t.Fatalf("prepare on the destination: exit %d, %q", code, errs)
	}
	if got := dst.states(t); len(got) != 1 || got[m0] != "attached web01" {
		t.Fatalf("on the destination after prepare: %v", got)
	}
}

func joinValues(m map[string]string) string {
	var s []string
	for _, v := range m {
		s = append(s, v)
	}
	return strings.Join(s, ",")
}

func TestAgentVF(t *testing.T) {
	h := startHost(t, cfgMixed)
	doc := bytes.ReplaceAll(fixture(t, "domain-vf.xml"), []byte(web01), []byte(db01))
	doc = bytes.ReplaceAll(doc, []byte("<name>web01</name>"), []byte("<name>db01</name>"))
	if code, out, errs := h.hookRun(t, doc, "db01", "prepare", "begin", "-"); code != 0 || out != "" || errs != "" {
		t.Fatalf("prepare: exit %d, %q, %q", code, out, errs)
	}
	if got := h.states(t); len(got) != 2 || got["0000:03:00.2"] != "attached db01" || got["0000:03:00.3"] != "attached db01" {
		t.Fatalf("after prepare: %v", got)
	}
	if code, _, errs := h.hookRun(t, doc, "db01", "release", "end", "-"); code != 0 || errs != "" {
		t.Fatalf("release: exit %d, %q", code, errs)
	}
	if got := h.states(t); got["0000:03:00.2"] != "reserved db01" {
		t.Fatalf("after release: %v", got)
	}

	// On another host whose 03:00.2 is taken: db01 arrives by migration and
	// gets the VFs leased for it, written into its hostdevs.
	dst := startHost(t, cfgMixed)
	if _, err := dst.v.Client.Reserve(context.Background(), web01, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 2}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := dst.hookRun(t, doc, "db01", "migrate", "begin", "-")
	if code != 0 || errs != "" || out == "" {
		t.Fatalf("migrate begin: exit %d, stderr %q, stdout %d bytes", code, errs, len(out))
	}
	moved, err := domxml.Parse([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range moved.Hostdevs {
		ids = append(ids, v.ID())
	}
	held := dst.states(t)
	if len(ids) != 2 || held[ids[0]] != "leased db01" || held[ids[1]] != "leased db01" {
		t.Fatalf("the rewritten XML names %v; the destination holds %v", ids, held)
	}
	if code, _, errs := dst.hookRun(t, []byte(out), "db01", "prepare", "begin", "-"); code != 0 || errs != "" {
		t.Fatalf("prepare of the rewritten XML: exit %d, %q", code, errs)
	}
	if got := dst.states(t); got[ids[0]] != "attached db01" || got[ids[1]] != "attached db01" {
		t.Fatalf("on the destination after prepare: %v", got)
	}
}

func TestAgentRefusals(t *testing.T) {
	h := startHost(t, cfgMixed)
	m := fixture(t, "domain-mdev.xml")
	// Five T4-4Q where the host has four: vgpud's reason on one line.
	five := &domxml.Request{Profile: "t4-4q", Count: 5}
	var vs []domxml.VGPU
	for i := range 5 {
		v, err := domxml.MdevVGPU(web01, i)
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	plain, err := domxml.SetRequest(fixture(t, "domain-plain.xml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := domxml.AddHostdevs(plain, vs)
	if err != nil {
		t.Fatal(err)
	}
	five.VGPUs = vs
	if doc, err = domxml.SetRequest(doc, five); err != nil {
		t.Fatal(err)
	}
	code, _, errs := h.hookRun(t, doc, "web01", "prepare", "begin", "-")
	if code != 1 || !strings.HasPrefix(errs, "vgpu: cannot make 5 x t4-4q ready for web01: ") || !strings.Contains(errs, "need 5 x t4-4q, 4 free on this host") ||
		strings.Count(errs, "\n") != 1 {
		t.Fatalf("prepare beyond capacity: exit %d, %q", code, errs)
	}
	if got := h.states(t); len(got) != 0 {
		t.Fatalf("a refused prepare left %v", got)
	}
	// A profile this host does not carve.
	other := bytes.ReplaceAll(m, []byte(`profile="t4-4q"`), []byte(`profile="t4-8q"`))
	code, _, errs = h.hookRun(t, other, "web01", "prepare", "begin", "-")
	if code != 1 || !strings.HasPrefix(errs, "vgpu: cannot make 1 x t4-8q ready for web01: ") || !strings.Contains(errs, "t4-8q") {
		t.Fatalf("prepare of a profile the host lacks: exit %d, %q", code, errs)
	}
	// vgpud down: a domain without a request passes without a client even
	// being made; one with a request fails saying so.
	nothing := filepath.Join(t.TempDir(), "nothing.sock")
	down := &host{a: newAgent(nothing)}
	if code, _, errs = down.hookRun(t, fixture(t, "domain-plain.xml"), "web01", "prepare", "begin", "-"); code != 0 || errs != "" {
		t.Fatalf("a domain without a request with vgpud down: exit %d, %q", code, errs)
	}
	if down.a.c != nil {
		t.Fatal("the agent made a client for a domain without a request")
	}
	code, _, errs = down.hookRun(t, m, "web01", "prepare", "begin", "-")
	if want := "vgpu: cannot make 1 x t4-4q ready for web01: vgpud unavailable on " + nothing +
		": no such file or directory (is vgpud running? systemctl start vgpud)\n"; code != 1 || errs != want {
		t.Fatalf("prepare with vgpud down: exit %d, %q; want %q", code, errs, want)
	}
}

// TestAgentLeaseDroppedWhenHostdevsDoNotFit: a migrating domain whose
// hostdevs vgpud's leases cannot serve (PCI hostdevs under an mdev
// profile, as a hand-edited definition may have) is refused, and the
// leases taken for it go at once rather than when they expire.
func TestAgentLeaseDroppedWhenHostdevsDoNotFit(t *testing.T) {
	dst := startHost(t, cfgMixed)
	doc := bytes.ReplaceAll(fixture(t, "domain-vf.xml"), []byte(`profile="mi25-4g"`), []byte(`profile="t4-4q"`))
	code, out, errs := dst.hookRun(t, doc, "web01", "migrate", "begin", "-")
	if code != 1 || out != "" || !strings.Contains(errs, "too few PCI functions for its 2 hostdevs") {
		t.Fatalf("migrate begin with PCI hostdevs under an mdev profile: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if held := dst.states(t); len(held) != 0 {
		t.Fatalf("the refused migration left %v", held)
	}
}

// mdevDocWith returns the mdev fixture with an origin in its request, as a
// migration's source writes it.
func mdevDocWith(t *testing.T) func(domxml.Origin) []byte {
	t.Helper()
	base := fixture(t, "domain-mdev.xml")
	d, err := domxml.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return func(o domxml.Origin) []byte {
		r := *d.Request
		r.Origin = &o
		doc, err := domxml.SetRequest(base, &r)
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
}

// TestAgentAdmission: at migrate begin the destination leases only vGPUs
// like the source's (the origin in the request): another type or vendor
// driver is refused with one line naming both, and no lease is left.
func TestAgentAdmission(t *testing.T) {
	dst := startHost(t, cfgMixed)
	with := mdevDocWith(t)
	for _, c := range []struct {
		origin domxml.Origin
		want   string
	}{
		{domxml.Origin{Host: "host-a", Type: "nvidia-231", Driver: "nvidia"}, "differs from the one it runs with: type nvidia-232 here, nvidia-231 on host-a"},
		{domxml.Origin{Host: "host-a", Type: "nvidia-232", Driver: "nouveau"}, "vendor driver nvidia here, nouveau on host-a"},
	} {
		code, _, errs := dst.hookRun(t, with(c.origin), "web01", "migrate", "begin", "-")
		if code == 0 || !strings.Contains(errs, c.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Fatalf("migrate begin with origin %+v: exit %d, %q; want one line with %q", c.origin, code, errs, c.want)
		}
		if held := dst.states(t); len(held) != 0 {
			t.Fatalf("a refused migration left %v", held)
		}
	}
	code, _, errs := dst.hookRun(t, with(domxml.Origin{Host: "host-a", Type: "nvidia-232", Driver: "nvidia"}), "web01", "migrate", "begin", "-")
	if code != 0 || !strings.HasPrefix(joinValues(dst.states(t)), "leased web01") {
		t.Fatalf("migrate begin with a matching origin: exit %d, %q, held %v", code, errs, dst.states(t))
	}
}

// TestAgentProbe: vgpuctl migrate --dry-run's probe gets the destination's
// answer (what it would lease and how many are free, or its refusal: no
// capacity, another type) on one line, the hook always fails the probe
// migration, and nothing is leased.
func TestAgentProbe(t *testing.T) {
	dst := startHost(t, cfgMixed)
	with := mdevDocWith(t)
	probe := func(o domxml.Origin) []byte {
		o.Probe = true
		return with(o)
	}
	m0, _ := domxml.MdevUUID(web01, 0)
	same := domxml.Origin{Host: "host-a", Type: "nvidia-232", Driver: "nvidia"}
	code, out, errs := dst.hookRun(t, probe(same), "web01", "migrate", "begin", "-")
	if want := "vgpu: probe: admits: 1 x t4-4q for web01 would be leased here (" + m0 + "; 4 free); nothing was leased\n"; code != 1 || out != "" || errs != want {
		t.Fatalf("probe: exit %d, stdout %q, stderr %q; want exit 1, nothing printed, %q", code, out, errs, want)
	}
	if held := dst.states(t); len(held) != 0 {
		t.Fatalf("a probe left %v", held)
	}
	code, _, errs = dst.hookRun(t, probe(domxml.Origin{Host: "host-a", Type: "nvidia-231", Driver: "nvidia"}), "web01", "migrate", "begin", "-")
	if code != 1 || !strings.HasPrefix(errs, "vgpu: probe: refuses: this host's vGPU") || !strings.Contains(errs, "type nvidia-232 here, nvidia-231 on host-a") {
		t.Fatalf("probe with another type: exit %d, %q", code, errs)
	}
	if _, err := dst.v.Client.Reserve(context.Background(), db01, api.ReserveRequest{Name: "db01", Profile: "t4-4q", Count: 4}); err != nil {
		t.Fatal(err)
	}
	code, _, errs = dst.hookRun(t, probe(same), "web01", "migrate", "begin", "-")
	if code != 1 || !strings.HasPrefix(errs, "vgpu: probe: refuses: ") || !strings.Contains(errs, "need 1 x t4-4q, 0 free on this host") {
		t.Fatalf("probe with none free: exit %d, %q", code, errs)
	}
	if held := dst.states(t); len(held) != 4 || strings.Contains(joinValues(held), "web01") {
		t.Fatalf("after the refused probe the destination holds %v", held)
	}
}
