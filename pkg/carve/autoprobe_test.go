package carve_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// autoprobeScenarios are the changes that enable VFs with the PF's
// sriov_drivers_autoprobe turned off: by sriov_numvfs, a gim reload and
// amd-smi, from nothing and as a re-split.
var autoprobeScenarios = []scenario{
	{"mi25 fresh to 4:1", "mi25", nil, "mi25-4g"},
	{"mi25 4:1 to 8:1", "mi25", []string{"mi25-4g"}, "mi25-2g"},
	{"s7150 fresh to 4:1 (gim reload)", "s7150", nil, "s7150-2g"},
	{"s7150 4:1 to 8:1 (gim reload)", "s7150", []string{"s7150-2g"}, "s7150-1g"},
	{"mi300x fresh to 8:1 (amd-smi)", "mi300x", nil, "mi300x-24g"},
	{"mi300x 8:1 to 1:1 (amd-smi)", "mi300x", []string{"mi300x-24g"}, "mi300x-192g"},
	{"b50 fresh to 4:1", "arc-pro-b50", nil, "b50-4g"},
}

// ledgerRig is a rig whose carver keeps original drivers and turns of
// autoprobe in a ledger, as vgpud's and vgpuctl's do; restart makes a new
// carver on the same kernel and ledger, as the next process would.
type ledgerRig struct {
	*rig
	l     *ledger.Ledger
	locks string
	// crashAt, when above 0, stops the carver dead (a panic, as a kill -9
	// would) right after its crashAt-th step from now: a kernel write or
	// a journal record begun or closed.
	crashAt, steps int
}

func newLedgerRig(t *testing.T, s scenario) *ledgerRig {
	t.Helper()
	r := &ledgerRig{rig: newRig(t, s.model), locks: filepath.Join(t.TempDir(), "locks")}
	var err error
	if r.l, err = ledger.Open(filepath.Join(t.TempDir(), "ledger.db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.l.Close() })
	r.rec.AfterWrite = func(w sysfstest.Write) { r.step("write " + w.Path) }
	r.restart()
	for _, p := range s.setup {
		if _, err := r.do(context.Background(), p, carve.Options{}); err != nil {
			t.Fatalf("setup carve %s: %v", p, err)
		}
	}
	return r
}

func (r *ledgerRig) restart() {
	r.c = carve.New(r.rec, r.cat, r.l, carve.WithLocker(carve.NewLocker(r.locks)),
		carve.WithAutoprobeJournal(crashJournal{r.l, r}), carve.WithToolRetry(3, time.Millisecond))
}

func (r *ledgerRig) step(what string) {
	if r.crashAt <= 0 {
		return
	}
	if r.steps++; r.steps == r.crashAt {
		r.crashAt = 0
		panic(sysfstest.Crash{Step: what})
	}
}

// crashJournal is the ledger's journal with its records as crash points.
type crashJournal struct {
	*ledger.Ledger
	r *ledgerRig
}

func (j crashJournal) BeginAutoprobe(pf pci.Address, was bool) (uint64, error) {
	id, err := j.Ledger.BeginAutoprobe(pf, was)
	j.r.step("journal begin")
	return id, err
}

func (j crashJournal) EndAutoprobe(id uint64) error {
	err := j.Ledger.EndAutoprobe(id)
	j.r.step("journal end")
	return err
}

// autoprobeOn reads the rig's PF's sriov_drivers_autoprobe.
func (r *ledgerRig) autoprobeOn(t *testing.T) bool {
	t.Helper()
	on, err := sriov.Autoprobe(r.k, r.gpu)
	if err != nil {
		t.Fatal(err)
	}
	return on
}

func (r *ledgerRig) open(t *testing.T) []sriov.AutoprobeRecord {
	t.Helper()
	recs, err := r.l.OpenAutoprobes()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// A write that fails at any step of a change is undone with the
// autoprobe setting, and the journal's record of it closed; when putting
// the setting back fails too, the record stays open, and the repair puts
// it back once the kernel takes writes again.
func TestAutoprobeUndoAtEveryFault(t *testing.T) {
	ctx := context.Background()
	for _, s := range autoprobeScenarios {
		t.Run(s.name, func(t *testing.T) {
			probe := newLedgerRig(t, s)
			writes := changeWrites(t, probe.rig, s.prof, carve.Options{})
			for i, w := range writes {
				r := newLedgerRig(t, s)
				failWrite(r.k, writes, i)
				_, err := r.do(ctx, s.prof, carve.Options{})
				if err == nil && w.Tool == "" {
					t.Fatalf("write %d (%s): no error", i+1, w.Path)
				}
				if !r.autoprobeOn(t) || len(r.open(t)) != 0 {
					t.Fatalf("fault at write %d (%s <- %q): autoprobe on %v, open records %+v; err %v",
						i+1, w.Path, w.Data, r.autoprobeOn(t), r.open(t), err)
				}
			}

			// Every write of the setting after the first fails: neither
			// the change's own nor its undo's put it back.
			r := newLedgerRig(t, s)
			ap := pci.DevicePath(r.gpu) + "/sriov_drivers_autoprobe"
			r.k.InjectFault(simkernel.Fault{Path: ap, Nth: 2, Always: true, Errno: syscall.EIO})
			if _, err := r.do(ctx, s.prof, carve.Options{}); !errors.Is(err, carve.ErrUndo) {
				t.Fatalf("with the setting stuck off: %v, want ErrUndo", err)
			}
			if recs := r.open(t); r.autoprobeOn(t) || len(recs) != 1 || !recs[0].Was || recs[0].PF != r.gpu {
				t.Fatalf("setting stuck off: autoprobe on %v, records %+v; want off, with one record of on", r.autoprobeOn(t), recs)
			}
			if _, err := r.c.RepairAutoprobe(ctx); err == nil {
				t.Fatal("repair while the kernel refuses the write: no error")
			}
			r.k.ClearFaults()
			done, err := r.c.RepairAutoprobe(ctx)
			if err != nil || len(done) != 1 || !r.autoprobeOn(t) || len(r.open(t)) != 0 {
				t.Fatalf("repair: %q, %v; autoprobe on %v, records %+v", done, err, r.autoprobeOn(t), r.open(t))
			}
		})
	}
}

// A change stopped dead after any of its steps (a kill -9 of vgpud or
// vgpuctl) never leaves the setting turned without an open record of
// what it was; the next process puts it back, whether by a repair
// (vgpud's start, every reconcile) or by the next change of the GPU
// (vgpuctl carve), which then carves as asked.
func TestAutoprobeCrashAtEveryStep(t *testing.T) {
	ctx := context.Background()
	for _, s := range autoprobeScenarios {
		t.Run(s.name, func(t *testing.T) {
			probe := newLedgerRig(t, s)
			probe.crashAt = 1 << 30 // counts the steps, never reached
			probe.mustDo(t, s.prof)
			n := probe.steps
			if n == 0 {
				t.Fatal("the change made no steps")
			}
			turned := false
			for i := 1; i <= n; i++ {
				for _, next := range []string{"repair", "carve"} {
					t.Run(fmt.Sprintf("step %d then %s", i, next), func(t *testing.T) {
						r := newLedgerRig(t, s)
						r.crashAt = i
						step, ok := sysfstest.Crashed(func() { _, _ = r.do(ctx, s.prof, carve.Options{}) })
						if !ok {
							t.Fatalf("no crash at step %d of %d", i, n)
						}
						recs := r.open(t)
						if !r.autoprobeOn(t) {
							turned = true
							if len(recs) != 1 || !recs[0].Was || recs[0].PF != r.gpu {
								t.Fatalf("crash after %s: autoprobe off, records %+v; want one record of on", step, recs)
							}
						}
						r.restart()
						if next == "repair" {
							done, err := r.c.RepairAutoprobe(ctx)
							if err != nil || len(done) != len(recs) {
								t.Fatalf("repair after a crash after %s: %q, %v; records were %+v", step, done, err, recs)
							}
							if !r.autoprobeOn(t) || len(r.open(t)) != 0 {
								t.Fatalf("repair after a crash after %s: autoprobe on %v, records %+v", step, r.autoprobeOn(t), r.open(t))
							}
						}
						if res, err := r.do(ctx, s.prof, carve.Options{}); err != nil {
							t.Fatalf("carve after a crash after %s: %v\n%s", step, err, res.Plan)
						}
						checkCarried(t, r.rig, s.prof)
						if !r.autoprobeOn(t) || len(r.open(t)) != 0 {
							t.Fatalf("carve after a crash after %s: autoprobe on %v, records %+v", step, r.autoprobeOn(t), r.open(t))
						}
					})
				}
			}
			if !turned {
				t.Fatal("no crash point found the setting turned: the scenario does not exercise it")
			}
		})
	}
}

// A repair leaves alone a PF whose change runs now (its lock held): the
// record is that change's, which puts the setting back itself.
func TestAutoprobeRepairLeavesAChangeInFlight(t *testing.T) {
	ctx := context.Background()
	r := newLedgerRig(t, autoprobeScenarios[0])
	if _, err := r.l.BeginAutoprobe(r.gpu, true); err != nil {
		t.Fatal(err)
	}
	if err := sriov.SetAutoprobe(r.k, r.gpu, false); err != nil {
		t.Fatal(err)
	}
	unlock, err := carve.NewLocker(r.locks).Lock(ctx, vgpu.GPU(r.gpu))
	if err != nil {
		t.Fatal(err)
	}
	done, err := r.c.RepairAutoprobe(ctx)
	if err != nil || len(done) != 0 || r.autoprobeOn(t) || len(r.open(t)) != 1 {
		t.Fatalf("repair while the GPU's lock is held: %q, %v; autoprobe on %v, records %+v", done, err, r.autoprobeOn(t), r.open(t))
	}
	unlock()
	if done, err := r.c.RepairAutoprobe(ctx); err != nil || len(done) != 1 || !r.autoprobeOn(t) || len(r.open(t)) != 0 {
		t.Fatalf("repair once the lock is free: %q, %v; autoprobe on %v, records %+v", done, err, r.autoprobeOn(t), r.open(t))
	}
}
