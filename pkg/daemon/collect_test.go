package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/engine/enginetest"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// fakeDomains is libvirt's list of domains as a test sets it.
type fakeDomains struct {
	mu    sync.Mutex
	known map[string]bool
	err   error
}

func (f *fakeDomains) Domains(context.Context) (map[string]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	out := make(map[string]bool, len(f.known))
	for k, v := range f.known {
		out[k] = v
	}
	return out, nil
}

func (f *fakeDomains) set(known map[string]bool, err error) {
	f.mu.Lock()
	f.known, f.err = known, err
	f.mu.Unlock()
}

const domC = "9a6c8f3b-1d2e-4f40-ab9c-8d7e6f5a4b3c"

// TestCollect: domains libvirt no longer knows lose their vGPUs after the
// grace period, a defined shut-off domain keeps its reservation, a vGPU a
// QEMU still holds is never freed, expired leases go, and nothing is freed
// while libvirt's list is unknown.
func TestCollect(t *testing.T) {
	r := startMixed(t)
	e := r.d.engine
	var busy string
	for _, d := range []struct{ uuid, name, profile string }{{domA, "gone01", "t4-4q"}, {domB, "kept01", "t4-4q"}, {domC, "busy01", "mi25-4g"}} {
		h, err := r.c.Reserve(bg, d.uuid, api.ReserveRequest{Name: d.name, Profile: d.profile, Count: 1})
		if err != nil {
			t.Fatal(err)
		}
		busy = h.Allocations[0].VGPU
	}
	// busy01 runs here as far as its QEMU goes, though libvirt lost it.
	if _, err := r.c.Prepare(bg, domC, api.PrepareRequest{Name: "busy01", Profile: "mi25-4g", VGPUs: []string{busy}}); err != nil {
		t.Fatal(err)
	}
	g, _, _ := pci.IOMMUGroup(r.k, pci.MustParseAddress(busy))
	qemu, err := r.k.Open(pci.GroupDevicePath(g))
	if err != nil {
		t.Fatal(err)
	}
	defer qemu.Close()
	// A lease of an incoming domain that never arrived, and one that lapsed.
	if _, err := r.c.Lease(bg, "11111111-2222-4333-8444-555555555555", api.LeaseRequest{Name: "in01", Profile: "t4-4q", Count: 1, TTLSeconds: 600}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Lease(bg, "11111111-2222-4333-8444-666666666666", api.LeaseRequest{Name: "in02", Profile: "t4-4q", Count: 1, TTLSeconds: 1}); err != nil {
		t.Fatal(err)
	}

	now := time.Now().Add(5 * time.Second)
	const grace = time.Minute
	// libvirt unknown: only the lapsed lease goes.
	rep, err := e.Collect(bg, nil, now, grace)
	if err != nil || len(rep.Expired) != 1 || rep.Expired[0].DomainName != "in02" || len(rep.Freed)+len(rep.Waiting) != 0 {
		t.Fatalf("collect with libvirt unknown = %+v, %v", rep, err)
	}
	known := map[string]bool{domB: false} // kept01 defined, shut off
	rep, err = e.Collect(bg, known, now, grace)
	if err != nil || len(rep.Freed) != 0 || len(rep.Waiting) != 3 {
		t.Fatalf("first collect = %+v, %v; want 3 domains waiting out the grace period", rep, err)
	}
	rep, err = e.Collect(bg, known, now.Add(grace), grace)
	if len(rep.Freed) != 1 || rep.Freed[0].DomainUUID != domA || len(rep.Dropped) != 1 || rep.Dropped[0].DomainName != "in01" {
		t.Fatalf("collect after the grace period = %+v", rep)
	}
	// busy01 is refused: its QEMU holds the VF.
	if !errors.Is(err, client.ErrInUse) && (err == nil || !containsAll(err.Error(), "busy01", busy, "stop the VM first")) {
		t.Fatalf("collect of a gone domain whose vGPU is open: %v", err)
	}
	h, _ := r.c.Allocations(bg)
	if len(h.Leases) != 0 || len(h.Allocations) != 2 {
		t.Fatalf("holdings after the collection: %+v; want kept01 and busy01 only", h)
	}
	// Once its QEMU lets go, busy01's VF goes too.
	_ = qemu.Close()
	rep, err = e.Collect(bg, known, now.Add(2*grace), grace)
	if err != nil || len(rep.Freed) != 1 || rep.Freed[0].VGPU != busy {
		t.Fatalf("collect after QEMU let go = %+v, %v", rep, err)
	}
	// A domain that comes back within the grace period keeps its vGPUs.
	if _, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "gone01", Profile: "t4-4q", Count: 1}); err != nil {
		t.Fatal(err)
	}
	later := now.Add(3 * grace)
	if rep, _ := e.Collect(bg, known, later, grace); len(rep.Waiting) != 1 {
		t.Fatalf("collect = %+v", rep)
	}
	known[domA] = false
	_, _ = e.Collect(bg, known, later.Add(grace/2), grace)
	delete(known, domA)
	if rep, _ := e.Collect(bg, known, later.Add(grace), grace); len(rep.Freed) != 0 {
		t.Fatalf("a domain back within the grace period lost its vGPU: %+v", rep)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// TestFreeAndCollectThroughDaemon: vgpud frees a gone domain's vGPU on its
// own soon after a lifecycle event; vgpuctl release (Free) refuses a
// running domain unless forced.
func TestFreeAndCollectThroughDaemon(t *testing.T) {
	k := simkernel.NewExample(t, "mixed.yaml")
	dir := shortTemp(t)
	src := &fakeDomains{known: map[string]bool{domA: false, domB: true}}
	events := make(chan struct{}, 1)
	r := &rig{t: t, k: k, cfgPath: dir + "/config.yaml", stateDir: dir + "/state", socket: dir + "/vgpud.sock",
		domains: src, events: events, grace: 200 * time.Millisecond}
	if err := engine.WriteConfig(r.cfgPath, []byte(cfgMixed)); err != nil {
		t.Fatal(err)
	}
	r.run()
	for _, d := range []string{domA, domB} {
		if _, err := r.c.Reserve(bg, d, api.ReserveRequest{Name: "dom", Profile: "t4-4q", Count: 1}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := r.c.Free(bg, domB, false)
	wantErr(t, err, client.ErrInUse, "free a running domain")
	if !containsAll(err.Error(), domB, "runs") {
		t.Fatalf("refusal: %v", err)
	}
	if h, err := r.c.Free(bg, domB, true); err != nil || len(h.Allocations) != 1 {
		t.Fatalf("forced free = %+v, %v", h, err)
	}
	// domA is undefined: libvirt's event wakes the collection.
	src.set(map[string]bool{}, nil)
	events <- struct{}{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := r.c.Allocations(bg)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Allocations) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("vgpud still holds %+v for a domain gone from libvirt", h.Allocations)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCollectIncoming: a domain that came in by migration and vanished (its
// incoming migration failed after prepare) loses its vGPU at once, and the
// mdev the migration touched is removed and carved anew.
func TestCollectIncoming(t *testing.T) {
	r := startMixed(t)
	if _, err := r.c.Lease(bg, domA, api.LeaseRequest{Name: "mig01", Profile: "t4-4q", Count: 1, TTLSeconds: 600}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "mig01", Profile: "t4-4q", VGPUs: []string{mdevA0}}); err != nil {
		t.Fatal(err)
	}
	as := r.allocations()
	if len(as) != 1 || as[0].VGPU != mdevA0 || !as[0].Incoming {
		t.Fatalf("allocations after an incoming prepare: %+v; want %s incoming", as, mdevA0)
	}
	// An ordinary reservation of a gone domain waits out the grace period.
	if _, err := r.c.Reserve(bg, domB, api.ReserveRequest{Name: "db01", Profile: "t4-4q", Count: 1}); err != nil {
		t.Fatal(err)
	}
	rep, err := r.d.engine.Collect(bg, map[string]bool{}, time.Now(), time.Hour)
	if err != nil || len(rep.Freed) != 1 || rep.Freed[0].VGPU != mdevA0 || len(rep.Waiting) != 1 {
		t.Fatalf("collect = %+v, %v; want %s freed at once and db01 waiting", rep, err, mdevA0)
	}
	if _, ok, _ := mdev.Get(r.k, mdevA0); ok {
		t.Fatalf("the mdev %s of the failed incoming migration is still there", mdevA0)
	}
	vs, _ := r.c.VGPUs(bg)
	n := 0
	for _, v := range vs {
		if v.Profile == "t4-4q" {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("the t4-4q pool has %d vGPUs after the recreation; want 4", n)
	}
}

// TestCollectOnTime: vGPUs of domains undefined at once go when their own
// grace period ends (within a second, on synctest's fake clock), whether
// libvirt's events come steadily or only for the undefines; a second batch
// undefined later keeps its vGPUs until its own grace ends.
func TestCollectOnTime(t *testing.T) {
	t.Run("steady events", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { collectOnTime(t, true) }) })
	t.Run("quiet", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { collectOnTime(t, false) }) })
}

// collectOnTime is TestCollectOnTime in a synctest bubble; steady sends
// an event every 100 ms, else one follows each undefine.
func collectOnTime(t *testing.T, steady bool) {
	const grace = 30 * time.Second
	dir := t.TempDir()
	if err := engine.WriteConfig(dir+"/config.yaml", []byte(cfgMixed)); err != nil {
		t.Fatal(err)
	}
	src := &fakeDomains{known: map[string]bool{}}
	events := make(chan struct{}, 1)
	d, err := New(Options{ConfigPath: dir + "/config.yaml", FS: simkernel.NewExample(t, "mixed.yaml"), StateDir: dir + "/state",
		SocketPath: dir + "/vgpud.sock", Logger: enginetest.Logger(), Domains: src, DomainEvents: events, CollectGrace: grace})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	if rep := d.engine.Start(ctx); rep.Error != "" {
		t.Fatal(rep.Error)
	}
	// Eight domains, defined and shut off, one vGPU each.
	var first, second []string
	for i := range 8 {
		u := fmt.Sprintf("5e1a0c2d-0000-4000-8000-%012d", i)
		prof := []string{"l40s-12q", "t4-4q"}[i%2]
		if _, err := d.engine.Reserve(ctx, alloc.Request{DomainUUID: u, DomainName: fmt.Sprintf("dom%d", i), Profile: prof, Count: 1}); err != nil {
			t.Fatal(err)
		}
		if i < 4 {
			first = append(first, u)
		} else {
			second = append(second, u)
		}
	}
	set := func(us ...string) {
		k := map[string]bool{}
		for _, u := range us {
			k[u] = false
		}
		src.set(k, nil)
	}
	set(append(first, second...)...)
	// libvirt's events: one every 100 ms (other domains start and stop),
	// when steady.
	var wg sync.WaitGroup
	wg.Go(func() { d.engine.RunCollect(ctx, events, 0, grace) })
	wg.Go(func() {
		for steady {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			select {
			case events <- struct{}{}:
			default:
			}
		}
	})
	held := func() map[string]bool {
		t.Helper()
		as, err := d.ledger.Allocations()
		if err != nil {
			t.Fatal(err)
		}
		h := map[string]bool{}
		for _, a := range as {
			h[a.DomainUUID] = true
		}
		return h
	}
	check := func(when string, want, gone []string) {
		t.Helper()
		synctest.Wait()
		h := held()
		for _, u := range want {
			if !h[u] {
				t.Errorf("%s: domain %s lost its vGPU", when, u)
			}
		}
		for _, u := range gone {
			if h[u] {
				t.Errorf("%s: domain %s still holds its vGPU", when, u)
			}
		}
	}
	undefine := func(keep ...string) {
		set(keep...)
		if !steady {
			events <- struct{}{}
		}
	}
	time.Sleep(5 * time.Second)
	undefine(second...) // the first four are undefined at once
	time.Sleep(10 * time.Second)
	undefine() // and the other four, 10 s later
	time.Sleep(grace - 10*time.Second - 500*time.Millisecond)
	check("0.5 s before the first grace ends", append(first, second...), nil)
	time.Sleep(1500 * time.Millisecond)
	check("1 s after the first grace ends", second, first)
	time.Sleep(10*time.Second - 1500*time.Millisecond)
	check("0.5 s before the second grace ends", second, nil)
	time.Sleep(1500 * time.Millisecond)
	check("1 s after the second grace ends", nil, second)
	cancel()
	wg.Wait()
}
