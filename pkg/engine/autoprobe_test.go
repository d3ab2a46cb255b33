package engine

import (
	"fmt"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

const cfgMI25Only = "version: v1\ngpus:\n  - address: \"0000:03:00.0\"\n    profile: mi25-4g\n"

var mi25PF = pci.MustParseAddress("0000:03:00.0")

// autoprobeRig is an engine on a recording view of the fake kernel.
func autoprobeRig(t *testing.T, yaml string) (*engineRig, *sysfstest.Recorder) {
	t.Helper()
	var rec *sysfstest.Recorder
	r := unstartedEngineRig(t, "mixed.yaml", yaml, func(k *simkernel.Kernel) sysfs.FS {
		rec = sysfstest.Record(k)
		return rec
	})
	return r, rec
}

// checkRepaired starts a new engine, as vgpud's restart after the crash,
// and checks the PF's VF driver autoprobe is back on, no intent is left
// and the host is as configured; then again, as a second restart.
func (r *engineRig) checkRepaired(t *testing.T, after string) {
	t.Helper()
	for _, start := range []string{"the restart", "a second restart"} {
		r.restart()
		rep := r.e.Start(bg)
		if !rep.OK() {
			t.Fatalf("%s after a crash after %s: %+v", start, after, rep)
		}
		if on, err := sriov.Autoprobe(r.k, mi25PF); err != nil || !on {
			t.Fatalf("%s after a crash after %s: autoprobe on %v (%v); repaired %q", start, after, on, err, rep.Repaired)
		}
		if open, _ := r.l.OpenIntents(); len(open) != 0 {
			t.Fatalf("%s after a crash after %s: intents left %+v", start, after, open)
		}
		if a := r.e.Assert(bg, nil); !a.Match {
			t.Fatalf("%s after a crash after %s: assert %+v", start, after, a)
		}
	}
}

// The carve vgpud makes at start, stopped dead after each of its writes:
// the restart's repair puts the PF's VF driver autoprobe back on (issue
// 22.3: it stayed off for good), and says so when it had to.
func TestAutoprobeCrashDuringStartCarve(t *testing.T) {
	probe, rec := autoprobeRig(t, cfgMI25Only)
	if rep := probe.e.Start(bg); !rep.OK() {
		t.Fatalf("reference start: %+v", rep)
	}
	n := len(rec.Writes())
	turned := 0
	for i := 1; i <= n; i++ {
		t.Run(fmt.Sprintf("write %d", i), func(t *testing.T) {
			r, rec := autoprobeRig(t, cfgMI25Only)
			rec.CrashAfter(i)
			w, ok := sysfstest.Crashed(func() { r.e.Start(bg) })
			if !ok {
				t.Fatalf("no crash at write %d of %d", i, n)
			}
			if on, _ := sriov.Autoprobe(r.k, mi25PF); !on {
				turned++
			}
			r.checkRepaired(t, w)
		})
	}
	if turned == 0 {
		t.Fatal("no crash left the autoprobe off: the test does not reach the window")
	}
}

// A re-split (mi25-4g to mi25-2g by vgpuctl carve through vgpud) stopped
// dead after each of its writes: the restart puts autoprobe back on and
// the reconcile carves the GPU back to its config.
func TestAutoprobeCrashDuringResplit(t *testing.T) {
	probe, rec := autoprobeRig(t, cfgMI25Only)
	if rep := probe.e.Start(bg); !rep.OK() {
		t.Fatalf("reference start: %+v", rep)
	}
	from := len(rec.Writes())
	if _, err := probe.e.Carve(bg, vgpu.GPU(mi25PF), "mi25-2g", carve.Options{}); err != nil {
		t.Fatal(err)
	}
	n := len(rec.Writes()) - from
	turned := 0
	for i := 1; i <= n; i++ {
		t.Run(fmt.Sprintf("write %d", i), func(t *testing.T) {
			r, rec := autoprobeRig(t, cfgMI25Only)
			if rep := r.e.Start(bg); !rep.OK() {
				t.Fatalf("start: %+v", rep)
			}
			rec.CrashAfter(i)
			w, ok := sysfstest.Crashed(func() { _, _ = r.e.Carve(bg, vgpu.GPU(mi25PF), "mi25-2g", carve.Options{}) })
			if !ok {
				t.Fatalf("no crash at write %d of %d", i, n)
			}
			if on, _ := sriov.Autoprobe(r.k, mi25PF); !on {
				turned++
				r.restart()
				rep := r.e.Start(bg)
				if !strings.Contains(strings.Join(rep.Repaired, "\n"), "VF driver autoprobe of 0000:03:00.0 was left off by a change cut short: put back on") {
					t.Fatalf("the restart's report does not say it put autoprobe back: %q", rep.Repaired)
				}
			}
			r.checkRepaired(t, w)
		})
	}
	if turned == 0 {
		t.Fatal("no crash left the autoprobe off: the test does not reach the window")
	}
}

// A reconcile while vgpud runs puts back what a crash of vgpuctl's own
// carve (no vgpud) left: the ledger's record, with autoprobe off.
func TestAutoprobeRepairedByReconcile(t *testing.T) {
	r := newEngineRig(t, "mixed.yaml", cfgMI25Only)
	if _, err := r.l.BeginAutoprobe(mi25PF, true); err != nil {
		t.Fatal(err)
	}
	if err := sriov.SetAutoprobe(r.k, mi25PF, false); err != nil {
		t.Fatal(err)
	}
	rep := r.e.Reconcile(bg, ReasonSIGHUP)
	if !rep.OK() || len(rep.Repaired) != 1 {
		t.Fatalf("reconcile: %+v", rep)
	}
	if on, _ := sriov.Autoprobe(r.k, mi25PF); !on {
		t.Fatal("autoprobe still off after the reconcile")
	}
	if open, _ := r.l.OpenIntents(); len(open) != 0 {
		t.Fatalf("intents left: %+v", open)
	}
}
