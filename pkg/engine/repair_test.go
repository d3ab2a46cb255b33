package engine

import (
	"path/filepath"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/engine/enginetest"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// engineRig is an Engine on the fake kernel with a ledger in a temp dir;
// restart makes a new Engine on the same ledger, as a new vgpud would.
type engineRig struct {
	t   testing.TB
	k   *simkernel.Kernel
	fs  sysfs.FS // the engine's view of k: k itself unless set
	l   *ledger.Ledger
	cfg *config.Config
	e   *Engine
}

func newEngineRig(t *testing.T, hostFile, yaml string) *engineRig {
	t.Helper()
	r := unstartedEngineRig(t, hostFile, yaml, nil)
	if rep := r.e.Start(bg); !rep.OK() {
		t.Fatalf("first start: %+v", rep)
	}
	return r
}

// unstartedEngineRig is newEngineRig before its first start, its engine
// on view(k) when view is given.
func unstartedEngineRig(t *testing.T, hostFile, yaml string, view func(*simkernel.Kernel) sysfs.FS) *engineRig {
	t.Helper()
	return engineRigOn(t, simkernel.NewExample(t, hostFile), yaml, view)
}

// engineRigOn is unstartedEngineRig on the kernel k.
func engineRigOn(t testing.TB, k *simkernel.Kernel, yaml string, view func(*simkernel.Kernel) sysfs.FS) *engineRig {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	r := &engineRig{t: t, k: k, l: l, cfg: cfg}
	if view != nil {
		r.fs = view(r.k)
	}
	r.restart()
	return r
}

// restartRepairs restarts the engine and starts it, failing the test
// unless the start is OK and its repairs say want.
func (r *engineRig) restartRepairs(want string) {
	r.t.Helper()
	r.restart()
	rep := r.e.Start(bg)
	if !rep.OK() || !strings.Contains(strings.Join(rep.Repaired, "\n"), want) {
		r.t.Fatalf("start after the restart: %+v; want a repair saying %q", rep, want)
	}
}

func (r *engineRig) restart() {
	r.t.Helper()
	cat, err := profile.Load()
	if err != nil {
		r.t.Fatal(err)
	}
	fs := r.fs
	if fs == nil {
		fs = r.k
	}
	r.e, err = NewEngine(EngineOptions{FS: fs, Ledger: r.l, Catalog: cat, Config: r.cfg, LockDir: r.t.TempDir(), Logger: enginetest.Logger()})
	if err != nil {
		r.t.Fatal(err)
	}
}

var t4 = pci.MustParseAddress("0000:3b:00.0")

// TestSwapCrashRepair plants the intent of an mdev swap cut short at each
// of its steps, starts a new engine, and checks the domain holds its
// identity, which exists, and that nothing leaked or is held twice.
func TestSwapCrashRepair(t *testing.T) {
	for _, step := range []string{"intent only", "from removed", "to created"} {
		t.Run(step, func(t *testing.T) {
			r := newEngineRig(t, "mixed.yaml", cfgMixed)
			insts, _ := mdev.Instances(r.k)
			from := insts[0].UUID
			s := swapIntent{DomainUUID: domA, DomainName: "web01", Profile: "t4-4q", GPU: t4, From: from, To: mdevA0,
				Parent: insts[0].Parent, Type: insts[0].Type}
			err := r.l.Update(func(tx *ledger.Tx) error {
				if err := tx.PutAllocation(ledger.Allocation{VGPU: from, GPU: t4, Profile: "t4-4q", DomainUUID: domA,
					DomainName: "web01", State: ledger.StateReserved}); err != nil {
					return err
				}
				_, err := tx.BeginIntentData(ledger.IntentMdevSwap, t4, "planted", s)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if step != "intent only" {
				if err := mdev.Remove(r.k, from); err != nil {
					t.Fatal(err)
				}
			}
			if step == "to created" {
				if err := mdev.Create(r.k, s.Parent, s.Type, mdevA0); err != nil {
					t.Fatal(err)
				}
			}
			r.restartRepairs("rolled forward")
			if _, ok, _ := mdev.Get(r.k, mdevA0); !ok {
				t.Fatalf("%s does not exist after repair", mdevA0)
			}
			if insts, _ := mdev.Instances(r.k); len(insts) != 4 {
				t.Fatalf("%d mdevs after repair, want 4", len(insts))
			}
			as, _ := r.l.Allocations()
			if len(as) != 1 || as[0].VGPU != mdevA0 || as[0].DomainUUID != domA || as[0].State != ledger.StateReserved {
				t.Fatalf("allocations after repair: %+v", as)
			}
			if open, _ := r.l.OpenIntents(); len(open) != 0 {
				t.Fatalf("intents left: %+v", open)
			}
			if a := r.e.Assert(bg, nil); !a.Match {
				t.Fatalf("assert after repair: %+v", a)
			}
		})
	}
}

func TestReleaseCrashRepair(t *testing.T) {
	r := newEngineRig(t, "mixed.yaml", cfgMixedDestroy)
	// The domain's mdev, swapped in at its start.
	insts, _ := mdev.Instances(r.k)
	u := mdevA0
	if err := mdev.Remove(r.k, insts[1].UUID); err != nil {
		t.Fatal(err)
	}
	if err := mdev.Create(r.k, insts[1].Parent, insts[1].Type, u); err != nil {
		t.Fatal(err)
	}
	err := r.l.Update(func(tx *ledger.Tx) error {
		if err := tx.PutAllocation(ledger.Allocation{VGPU: u, GPU: t4, Profile: "t4-4q", DomainUUID: domA,
			DomainName: "web01", State: ledger.StateReleasing}); err != nil {
			return err
		}
		_, err := tx.BeginIntentData(ledger.IntentRelease, t4, "planted", releaseIntent{DomainUUID: domA, DomainName: "web01", Mdevs: []string{u}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	r.restartRepairs("finished")
	if _, ok, _ := mdev.Get(r.k, u); ok {
		t.Fatalf("released mdev %s still there", u)
	}
	if insts, _ := mdev.Instances(r.k); len(insts) != 4 {
		t.Fatalf("%d mdevs after repair, want the pool of 4", len(insts))
	}
	if as, _ := r.l.Allocations(); len(as) != 0 {
		t.Fatalf("allocations after repair: %+v", as)
	}
}

func TestCarveCrashRepairAndDemotion(t *testing.T) {
	r := newEngineRig(t, "mixed.yaml", cfgMixed)
	mi25 := pci.MustParseAddress("0000:03:00.0")
	vfs, _ := sriov.VFs(r.k, mi25)
	// A VM was attached when the host went down; then a carve was cut short.
	if err := r.l.Update(func(tx *ledger.Tx) error {
		return tx.PutAllocation(ledger.Allocation{VGPU: vfs[0].Address.String(), GPU: mi25, Profile: "mi25-4g",
			DomainUUID: domA, DomainName: "web01", State: ledger.StateAttached})
	}); err != nil {
		t.Fatal(err)
	}
	for _, vf := range vfs[1:] {
		if err := pci.Unbind(r.k, vf.Address); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.l.BeginIntent(ledger.IntentCarve, mi25, "mi25-4g"); err != nil {
		t.Fatal(err)
	}
	r.restart()
	rep := r.e.Start(bg)
	joined := strings.Join(rep.Repaired, "\n")
	if !rep.OK() || rep.Changed != 1 || !strings.Contains(joined, "resolved by the reconcile") || !strings.Contains(joined, "its VM is not running") {
		t.Fatalf("start: %+v", rep)
	}
	for _, vf := range vfs {
		if drv, _ := pci.CurrentDriver(r.k, vf.Address); drv != "vfio-pci" {
			t.Fatalf("%s on %q after repair", vf.Address, drv)
		}
	}
	if a, _, _ := r.l.Allocation(vfs[0].Address.String()); a.State != ledger.StateReserved {
		t.Fatalf("attached allocation without a running VM: %+v", a)
	}
	if open, _ := r.l.OpenIntents(); len(open) != 0 {
		t.Fatalf("intents left: %+v", open)
	}
}
