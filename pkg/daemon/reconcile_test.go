package daemon

import (
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/ledger"
)

func countBy(vs []api.VGPU, key func(api.VGPU) string) map[string]int {
	m := map[string]int{}
	for _, v := range vs {
		m[key(v)]++
	}
	return m
}

func TestReconcileAtStart(t *testing.T) {
	r := startMixed(t)
	vs, err := r.c.VGPUs(bg)
	if err != nil {
		t.Fatal(err)
	}
	got := countBy(vs, func(v api.VGPU) string { return v.Profile + "/" + v.State })
	if got["mi25-4g/free"] != 4 || got["t4-4q/free"] != 4 || got["l40s-12q/free"] != 4 || len(vs) != 12 {
		t.Fatalf("vGPUs after start: %v", got)
	}
	h, err := r.c.Health(bg)
	if err != nil || h.Drift != 0 || !h.ConfigLoaded || h.LastReconcile.IsZero() {
		t.Fatalf("health = %+v, %v", h, err)
	}
	a, err := r.c.Assert(bg, nil)
	if err != nil || !a.Match {
		t.Fatalf("assert after start = %+v, %v", a, err)
	}
	// A second reconcile changes nothing, and writes nothing to the kernel.
	before := r.k.Writes("/sys/bus/pci/devices/0000:03:00.0/sriov_numvfs")
	rep, err := r.c.Reconcile(bg)
	if err != nil || rep.Changed != 0 || !rep.OK() || len(rep.GPUs) != 3 {
		t.Fatalf("second reconcile = %+v, %v", rep, err)
	}
	if after := r.k.Writes("/sys/bus/pci/devices/0000:03:00.0/sriov_numvfs"); after != before {
		t.Fatalf("a no-op reconcile wrote sriov_numvfs (%d -> %d)", before, after)
	}
	carved, _ := r.d.ledger.CarvedGPUs()
	if len(carved) != 3 {
		t.Fatalf("carved records: %+v", carved)
	}
	if open, _ := r.d.ledger.OpenIntents(); len(open) != 0 {
		t.Fatalf("intents left open: %+v", open)
	}
}

func TestReconcileUncarvesWhatTheConfigDrops(t *testing.T) {
	r := startMixed(t)
	held, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The MI25 leaves the config while a domain holds one of its VFs: refused.
	r.writeConfig(`version: v1
gpus:
  - address: "0000:3b:00.0"
    profile: t4-4q
  - all: true
    profile: l40s-12q
`)
	rep, err := r.d.Reload(bg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Refused != 1 || rep.Drift != 1 || len(rep.GPUs) != 3 {
		t.Fatalf("reload report: %+v", rep)
	}
	for _, g := range rep.GPUs {
		if g.GPU == "0000:03:00.0" && (g.Action != "uncarve" || len(g.Refused) != 1 || g.Refused[0].VGPU != held.Allocations[0].VGPU ||
			!strings.Contains(g.Refused[0].Holder, "reserved for domain web01")) {
			t.Fatalf("MI25 report: %+v", g)
		}
	}
	if a, _ := r.c.Assert(bg, nil); a.Match || len(a.GPUs) != 1 || a.GPUs[0].Desired != "" || a.GPUs[0].Actual != "mi25-4g" {
		t.Fatalf("assert while refused: %+v", a)
	}
	if _, err := r.c.Unreserve(bg, domA, ""); err != nil {
		t.Fatal(err)
	}
	rep, err = r.c.Reconcile(bg)
	if err != nil || !rep.OK() || rep.Changed != 1 {
		t.Fatalf("reconcile after the release: %+v, %v", rep, err)
	}
	gpus, _ := r.c.GPUs(bg)
	for _, g := range gpus {
		if g.Address == "0000:03:00.0" && (g.Profile != "" || g.SRIOV.NumVFs != 0) {
			t.Fatalf("MI25 after uncarve: %+v", g)
		}
	}
	carved, _ := r.d.ledger.CarvedGPUs()
	if len(carved) != 2 {
		t.Fatalf("carved records: %+v", carved)
	}
	// A GPU the config never named is left alone: carve it by hand, reconcile.
	if _, err := r.c.Carve(bg, api.CarveRequest{GPU: "0000:03:00.0", Profile: "mi25-2g"}); err != nil {
		t.Fatal(err)
	}
	if rep, _ := r.c.Reconcile(bg); rep.Changed != 0 {
		t.Fatalf("reconcile touched a GPU carved by hand: %+v", rep)
	}
	_ = ledger.StateReserved
}

func TestReloadKeepsConfigOnError(t *testing.T) {
	r := startMixed(t)
	r.writeConfig("version: v1\ngpus:\n  - address: \"0000:03:00.0\"\n    profile: mi25-3g\n")
	if _, err := r.d.Reload(bg); err == nil || !strings.Contains(err.Error(), "mi25-3g") {
		t.Fatalf("reload of a bad config: %v", err)
	}
	if c, _ := r.c.Config(bg); len(c.GPUs) != 3 {
		t.Fatalf("config after a bad reload: %+v", c)
	}
	// Through the signal channel, as SIGHUP does: a good config is applied.
	r.writeConfig("version: v1\ngpus:\n  - address: \"0000:03:00.0\"\n    profile: mi25-2g\n  - address: \"0000:3b:00.0\"\n    profile: t4-4q\n  - all: true\n    profile: l40s-12q\n")
	r.reload <- struct{}{}
	r.reload <- struct{}{} // the first is done once the second is taken
	vs, _ := r.c.VGPUs(bg)
	if n := countBy(vs, func(v api.VGPU) string { return v.Profile })["mi25-2g"]; n != 8 {
		t.Fatalf("after SIGHUP-style reload: %d mi25-2g vGPUs, want 8", n)
	}
}
