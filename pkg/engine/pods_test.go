package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

const (
	claimA = "5e0c1a2b-3c4d-4e5f-8a6b-7c8d9e0f1a2b"
	resT4  = "vgpu.example.org/t4-4q"
)

func podClaim(claim string, ids ...string) alloc.Request {
	return alloc.Request{Profile: "t4-4q", Count: len(ids), DomainUUID: claim, DomainName: "kubelet allocation of " + resT4,
		Pod: &ledger.Pod{Resource: resT4}}
}

// t4Pool is the free mdevs the T4 is carved into.
func t4Pool(t *testing.T, e *Engine) []string {
	t.Helper()
	vs, _, err := e.VGPUs(bg)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vs {
		if v.Profile == "t4-4q" {
			out = append(out, v.ID)
		}
	}
	return out
}

// TestClaimPodCrashRepair plants what vgpud leaves when it is killed at
// each step of a pod claim before the kubelet had the answer (the intent
// open) and starts a new engine: the claim is freed, said in the repair
// report, and the vGPU can be claimed again. A claim whose intent ended
// (the answer was on its way) is kept: PodResources decides.
func TestClaimPodCrashRepair(t *testing.T) {
	for _, step := range []string{"intent only", "claimed", "attached"} {
		t.Run(step, func(t *testing.T) {
			r := newEngineRig(t, "mixed.yaml", cfgMixed)
			id := t4Pool(t, r.e)[0]
			err := r.l.Update(func(tx *ledger.Tx) error {
				if step != "intent only" {
					st := ledger.StateReserved
					if step == "attached" {
						st = ledger.StateAttached
					}
					if err := tx.PutAllocation(ledger.Allocation{VGPU: id, GPU: t4, Profile: "t4-4q", DomainUUID: claimA,
						DomainName: "kubelet allocation of " + resT4, State: st, Pod: &ledger.Pod{Resource: resT4}}); err != nil {
						return err
					}
				}
				_, err := tx.BeginIntentData(ledger.IntentPodClaim, pci.Address{}, "planted",
					podClaimIntent{Claim: claimA, Resource: resT4, VGPUs: []string{id}})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			r.restartRepairs("the kubelet never had vgpud's answer")
			if as, _ := r.l.Allocations(); len(as) != 0 {
				t.Errorf("left held: %+v", as)
			}
			if ins, _ := r.l.OpenIntents(); len(ins) != 0 {
				t.Errorf("intents left open: %+v", ins)
			}
			if _, err := r.e.ClaimPod(bg, podClaim(claimB, id), []string{id}); err != nil {
				t.Errorf("claim again after the repair: %v", err)
			}
		})
	}
	// Answered: the intent ended with the claim attached. A new engine
	// keeps it (attached: the pod's, whether its VM runs or not).
	r := newEngineRig(t, "mixed.yaml", cfgMixed)
	id := t4Pool(t, r.e)[1]
	if _, err := r.e.ClaimPod(bg, podClaim(claimA, id), []string{id}); err != nil {
		t.Fatal(err)
	}
	r.restart()
	if rep := r.e.Start(bg); !rep.OK() {
		t.Fatalf("start = %+v", rep)
	}
	if a, ok, _ := r.l.Allocation(id); !ok || a.State != ledger.StateAttached || a.Pod == nil {
		t.Errorf("an answered claim after a restart: %+v, %v", a, ok)
	}
}

const claimB = "6f1d2b3c-4d5e-4f60-9b7c-8d9e0f1a2b3c"

// TestClaimPodGoneCaller: a kubelet that gave up before the host lock was
// had gets nothing claimed.
func TestClaimPodGoneCaller(t *testing.T) {
	r := newEngineRig(t, "mixed.yaml", cfgMixed)
	id := t4Pool(t, r.e)[0]
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := r.e.ClaimPod(ctx, podClaim(claimA, id), []string{id}); !errors.Is(err, context.Canceled) {
		t.Fatalf("claim for a gone caller: %v", err)
	}
	if as, _ := r.l.Allocations(); len(as) != 0 {
		t.Errorf("claimed for a gone caller: %+v", as)
	}
}

// TestCollectLeavesPods: libvirt's collection never frees what a pod
// holds: pods are not libvirt's domains.
func TestCollectLeavesPods(t *testing.T) {
	r := newEngineRig(t, "mixed.yaml", cfgMixed)
	id := t4Pool(t, r.e)[0]
	if _, err := r.e.ClaimPod(bg, podClaim(claimA, id), []string{id}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, at := range []time.Time{now, now.Add(time.Hour)} {
		rep, err := r.e.Collect(bg, map[string]bool{}, at, time.Minute)
		if err != nil || len(rep.Freed)+len(rep.Waiting) != 0 {
			t.Fatalf("collect = %+v, %v", rep, err)
		}
	}
	if _, ok, _ := r.l.Allocation(id); !ok {
		t.Error("a pod's vGPU freed by libvirt's collection")
	}
}

// TestChanges: a subscriber is woken by a ledger change (a claim), told
// which vGPUs it named, and by a kernel change (a carve), told that any
// may have changed, and no more once it cancelled.
func TestChanges(t *testing.T) {
	r := newEngineRig(t, "mixed.yaml", cfgMixed)
	sub := r.e.Changes()
	if c := sub.Take(); !c.All {
		t.Errorf("first Take %+v, want All (what came before the subscription is unknown)", c)
	}
	woken := func(what string) Change {
		t.Helper()
		select {
		case <-sub.C():
		case <-time.After(30 * time.Second):
			t.Fatalf("not woken by %s", what)
		}
		return sub.Take()
	}
	id := t4Pool(t, r.e)[0]
	if _, err := r.e.ClaimPod(bg, podClaim(claimA, id), []string{id}); err != nil {
		t.Fatal(err)
	}
	if c := woken("a claim"); c.All || !slices.Equal(c.VGPUs, []string{id}) {
		t.Errorf("a claim of %s: change %+v, want that vGPU alone", id, c)
	}
	if _, err := r.e.Uncarve(bg, vgpu.GPU(pci.MustParseAddress("0000:03:00.0")), carve.Options{}); err != nil {
		t.Fatal(err)
	}
	if c := woken("an uncarve"); !c.All {
		t.Errorf("an uncarve: change %+v, want All", c)
	}
	r.e.HostChanged()
	if c := woken("a kernel event"); !c.All {
		t.Errorf("a kernel event: change %+v, want All", c)
	}
	sub.Cancel()
	r.e.HostChanged()
	select {
	case <-sub.C():
		t.Error("woken after cancel")
	default:
	}
}
