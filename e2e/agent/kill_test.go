package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

const cfgMI25 = "version: v1\ngpus:\n  - address: \"0000:03:00.0\"\n    profile: mi25-4g\n"

// carveWrites runs the start of vgpud on the in-process fake kernel and
// records every sysfs write it makes: the steps to kill at.
func carveWrites(t *testing.T, hostFile, yaml string) []sysfstest.Write {
	t.Helper()
	e, rec := inProcessEngine(t, hostFile, yaml)
	if rep := e.Start(context.Background()); !rep.OK() {
		t.Fatalf("reference start: %+v", rep)
	}
	return rec.Writes()
}

// inProcessEngine is vgpud's engine on an in-process fake kernel of
// examples/hosts/<hostFile>, its writes recorded.
func inProcessEngine(t *testing.T, hostFile, yaml string) (*engine.Engine, *sysfstest.Recorder) {
	t.Helper()
	rec := sysfstest.Record(simkernel.NewExample(t, hostFile))
	cfg, err := config.Parse("test", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cat, err := profile.Load()
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.NewEngine(engine.EngineOptions{FS: rec, Ledger: l, Catalog: cat, Config: cfg, LockDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return e, rec
}

// TestKillDuringCarve kills vgpud at every write of the carve it makes at
// start, lets that write happen or fail, and starts vgpud again: the host
// ends as the config wants, with no intent left open, and the PF's VF
// driver autoprobe, which the carve turns off while the VFs appear, is on
// after the repair, after a SIGTERM and after a second start.
func TestKillDuringCarve(t *testing.T) {
	ws := carveWrites(t, "mixed.yaml", cfgMI25)
	if len(ws) < 5 {
		t.Fatalf("the carve made %d writes; expected the steps of mi25-4g", len(ws))
	}
	for i, w := range ws {
		crashCases(t, fmt.Sprintf("%02d-%s", i+1, filepath.Base(w.Path)), cfgMI25, func(t *testing.T, h *host, errno string) {
			h.hold(w.Path, sysfstest.Nth(ws, i))
			h.agent = h.spawnAgent()
			h.crash(errno)
			checkConsistent(t, h.c, 0)
			h.autoprobeOn(mi25, "after the repair")
			h.noOpenIntents()
			h.autoprobeOn(mi25, "after a SIGTERM")
			h.startAgent()
			h.autoprobeOn(mi25, "after a second start")
		})
	}
}

// TestKillDuringResplit kills vgpud while it re-splits a GPU on request
// (vgpuctl carve mi25-2g on a GPU its config carves to mi25-4g), at each
// write from turning the PF's VF driver autoprobe off to turning it back
// on: the restart puts it back on and carves the GPU to its config again.
func TestKillDuringResplit(t *testing.T) {
	ws := resplitWrites(t)
	autoprobe := "/sys/bus/pci/devices/" + mi25 + "/sriov_drivers_autoprobe"
	first, last := -1, -1
	for i, w := range ws {
		if w.Path != autoprobe {
			continue
		}
		if first < 0 {
			first = i
		}
		last = i
	}
	if first < 0 || last <= first {
		t.Fatalf("the re-split does not turn autoprobe off and on: %+v", ws)
	}
	for i := first; i <= last; i++ {
		w := ws[i]
		crashCases(t, fmt.Sprintf("%02d-%s", i+1, filepath.Base(w.Path)), cfgMI25, func(t *testing.T, h *host, errno string) {
			h.startAgent()
			// Counted from the injection on: the start's writes are done.
			h.hold(w.Path, sysfstest.Nth(ws, i))
			go func() { _, _ = h.c.Carve(bg, api.CarveRequest{GPU: mi25, Profile: "mi25-2g"}) }()
			h.crash(errno)
			checkConsistent(t, h.c, 0)
			h.autoprobeOn(mi25, "after the repair")
			h.noOpenIntents()
			h.autoprobeOn(mi25, "after a SIGTERM")
		})
	}
}

// resplitWrites runs, on the in-process fake kernel, vgpud's start on
// cfgMI25 and then a carve of mi25-2g, and returns the carve's writes.
func resplitWrites(t *testing.T) []sysfstest.Write {
	t.Helper()
	e, rec := inProcessEngine(t, "mixed.yaml", cfgMI25)
	if rep := e.Start(context.Background()); !rep.OK() {
		t.Fatalf("reference start: %+v", rep)
	}
	from := len(rec.Writes())
	if _, err := e.Carve(context.Background(), vgpu.GPU(pci.MustParseAddress(mi25)), "mi25-2g", carve.Options{}); err != nil {
		t.Fatalf("reference re-split: %v", err)
	}
	return rec.Writes()[from:]
}

// autoprobeOn checks the sriov_drivers_autoprobe of PF pf reads 1.
func (h *host) autoprobeOn(pf, when string) {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.sim.Mnt, "sys/bus/pci/devices", pf, "sriov_drivers_autoprobe"))
	if err != nil || strings.TrimSpace(string(b)) != "1" {
		h.t.Fatalf("VF driver autoprobe of %s %s: %q, %v; want 1\nvgpud:\n%s", pf, when, b, err, h.agentOut())
	}
}

// TestKillDuringPrepare kills vgpud at each step of the mdev swap that
// gives a domain its identity: the domain ends holding its mdev, which
// exists; the other mdevs are free; none is held twice or lost.
func TestKillDuringPrepare(t *testing.T) {
	const cfg = "version: v1\ngpus:\n  - address: \"0000:3b:00.0\"\n    profile: t4-4q\n"
	for _, step := range []string{"remove", "create"} {
		crashCases(t, step, cfg, func(t *testing.T, h *host, errno string) {
			h.startAgent()
			r, err := h.c.Reserve(bg, domB, api.ReserveRequest{Name: "db01", Profile: "t4-4q", Count: 1})
			if err != nil {
				t.Fatal(err)
			}
			if step == "remove" {
				h.hold(mdevRemove(r.Allocations[0].VGPU), 1)
			} else {
				h.hold(mdevCreate, 1)
			}
			cut := make(chan error, 1)
			go func() {
				_, err := h.c.Prepare(bg, domB, api.PrepareRequest{Name: "db01", Profile: "t4-4q", VGPUs: []string{mdevB0}})
				cut <- err
			}()
			h.crash(errno)
			// The caller learns that vgpud went away mid-change and
			// that its restart repairs it, not a bare EOF.
			if err := <-cut; !errors.Is(err, client.ErrGone) || !strings.Contains(err.Error(), "vgpud repairs or finishes what was cut short") {
				t.Errorf("prepare cut short by the crash: %v; want client.ErrGone saying vgpud's restart repairs it", err)
			}
			a := held(t, h.c)
			if len(a) != 1 || a[mdevB0] != domB+"/reserved" {
				t.Fatalf("allocations after the crash: %v; want %s reserved for db01", a, mdevB0)
			}
			checkConsistent(t, h.c, 1)
			if _, err := os.Stat(filepath.Join(h.sim.Mnt, "sys/bus/mdev/devices", mdevB0)); err != nil {
				t.Fatalf("mdev %s missing after repair: %v", mdevB0, err)
			}
			if _, err := h.c.Prepare(bg, domB, api.PrepareRequest{Name: "db01", Profile: "t4-4q", VGPUs: []string{mdevB0}}); err != nil {
				t.Fatalf("start after the repair: %v", err)
			}
			h.noOpenIntents()
		})
	}
}

// TestKillDuringRelease kills vgpud while a destroying release removes the
// domain's mdev, and while the reconcile after it makes the pool whole.
func TestKillDuringRelease(t *testing.T) {
	const cfg = "version: v1\ngpus:\n  - address: \"0000:3b:00.0\"\n    profile: t4-4q\non-release: destroy\n"
	for _, step := range []string{"remove", "recarve"} {
		crashCases(t, step, cfg, func(t *testing.T, h *host, errno string) {
			h.startAgent()
			if _, err := h.c.Prepare(bg, domB, api.PrepareRequest{Name: "db01", Profile: "t4-4q", VGPUs: []string{mdevB0}}); err != nil {
				t.Fatal(err)
			}
			if step == "remove" {
				h.hold(mdevRemove(mdevB0), 1)
			} else {
				h.hold(mdevCreate, 1)
			}
			go func() { _, _ = h.c.Release(bg, domB, api.ReleaseRequest{Name: "db01"}) }()
			h.crash(errno)
			checkConsistent(t, h.c, 0)
			if _, err := os.Stat(filepath.Join(h.sim.Mnt, "sys/bus/mdev/devices", mdevB0)); err == nil {
				t.Fatalf("the released mdev %s is still there", mdevB0)
			}
			vs, _ := h.c.VGPUs(bg)
			if len(vs) != 4 {
				t.Fatalf("%d vGPUs after repair, want the pool of 4", len(vs))
			}
			h.noOpenIntents()
		})
	}
}

// crashOutcomes runs f as two subtests of t: name-done, where the write
// vgpud is killed in is let through, and name-failed, where it fails with
// EIO (errno as h.crash takes it).
func crashOutcomes(t *testing.T, name string, f func(t *testing.T, errno string)) {
	for _, errno := range []string{"", "EIO"} {
		t.Run(name+"-"+map[string]string{"": "done", "EIO": "failed"}[errno], func(t *testing.T) { f(t, errno) })
	}
}

// crashCases is crashOutcomes on a fresh mixed.yaml host with config cfg,
// whose vgpud log is saved when the subtest ends.
func crashCases(t *testing.T, name, cfg string, f func(t *testing.T, h *host, errno string)) {
	crashOutcomes(t, name, func(t *testing.T, errno string) {
		h := newHost(t, "mixed.yaml", cfg)
		defer saveLog(t, h, "vgpud")
		f(t, h, errno)
	})
}
