package alloc

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/internal/testclock"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

type rig struct {
	a     *Allocator
	l     *ledger.Ledger
	clock *testclock.Clock // moves lease expiry
}

func newRig(t testing.TB) *rig {
	t.Helper()
	clk := testclock.New(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	cat, err := profile.Load()
	if err != nil {
		t.Fatal(err)
	}
	return &rig{a: New(l, cat), l: l, clock: clk}
}

// vfs is n VFs of prof on the GPU at gpu, on NUMA node numa.
func vfs(gpu string, numa, n int, prof string) []Candidate {
	pf := pci.MustParseAddress(gpu)
	out := make([]Candidate, n)
	for i := range out {
		vf := pf
		vf.Device, vf.Function = pf.Device+uint8((i+1)/8), uint8((i+1)%8)
		out[i] = Candidate{VGPU: vgpu.VGPU{ID: vf.String(), GPU: pf.String(), Kind: vgpu.KindVF, Profile: prof}, NUMANode: numa}
	}
	return out
}

// twoMI25 is two MI25s split 4 ways, one per NUMA node.
func twoMI25() []Candidate {
	return slices.Concat(vfs("0000:03:00.0", 0, 4, "mi25-4g"), vfs("0000:83:00.0", 1, 4, "mi25-4g"))
}

func uuidN(n int) string { return fmt.Sprintf("4dea22b3-1d52-d8f3-2516-%012x", n+1) }

func req(n, count int) Request {
	return Request{Profile: "mi25-4g", Count: count, DomainUUID: uuidN(n), DomainName: fmt.Sprintf("vm%d", n)}
}

func ids(as []ledger.Allocation) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.VGPU
	}
	return strings.Join(s, " ")
}

func (r *rig) allocate(t *testing.T, rq Request, host []Candidate) []ledger.Allocation {
	t.Helper()
	got, err := r.a.Allocate(context.Background(), rq, host)
	if err != nil {
		t.Fatalf("Allocate(%s, %d x %s): %v", rq.DomainName, rq.Count, rq.Profile, err)
	}
	return got
}

func TestLeastLoadedFirst(t *testing.T) {
	r := newRig(t)
	host := twoMI25()
	// One each: alternate GPUs, lowest id on a tie.
	for i, want := range []string{"0000:03:00.1", "0000:83:00.1", "0000:03:00.2", "0000:83:00.2"} {
		if got := ids(r.allocate(t, req(i, 1), host)); got != want {
			t.Errorf("domain %d got %s, want %s", i, got, want)
		}
	}
	// Two at once spread over both GPUs.
	if got := ids(r.allocate(t, req(10, 2), host)); got != "0000:03:00.3 0000:83:00.3" {
		t.Errorf("two got %s", got)
	}
	if _, _, err := r.a.ReleaseVGPU(context.Background(), "0000:03:00.1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.a.ReleaseVGPU(context.Background(), "0000:03:00.2"); err != nil {
		t.Fatal(err)
	}
	// Three when the first GPU is less loaded (1 to 3): two from it, then
	// a tie at 3 each, which the lowest id breaks.
	if got := ids(r.allocate(t, req(11, 3), host)); got != "0000:03:00.1 0000:03:00.2 0000:03:00.4" {
		t.Errorf("three got %s", got)
	}
	all, _ := r.l.Allocations()
	if len(all) != 7 {
		t.Errorf("%d allocations, want 7", len(all))
	}
	for _, a := range all {
		if a.State != ledger.StateReserved || a.Profile != "mi25-4g" || a.GPU.String() != a.VGPU[:8]+"00.0" || !a.Since.Equal(r.clock.Now()) {
			t.Errorf("allocation %+v", a)
		}
	}
}

// TestLoadCountsLeases: load is everything held on a GPU, leases too.
func TestLoadCountsLeases(t *testing.T) {
	r := newRig(t)
	host := twoMI25()
	if _, err := r.a.Lease(context.Background(), req(0, 2), host, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The lease took 03:00.1 and 83:00.1; load is even, so lowest id.
	if got := ids(r.allocate(t, req(1, 1), host)); got != "0000:03:00.2" {
		t.Errorf("got %s", got)
	}
}

func TestNUMAStrict(t *testing.T) {
	r := newRig(t)
	host := append(twoMI25(), vfs("0000:c3:00.0", -1, 4, "mi25-4g")...)
	one := 1
	rq := req(0, 3)
	rq.NUMANode = &one
	if got := ids(r.allocate(t, rq, host)); got != "0000:83:00.1 0000:83:00.2 0000:83:00.3" {
		t.Errorf("node 1 got %s", got)
	}
	rq = req(1, 2)
	rq.NUMANode = &one
	_, err := r.a.Allocate(context.Background(), rq, host)
	want := "need 2 x mi25-4g, 1 free on NUMA node 1 (0000:03:00.0: 0 of 4 allocated, NUMA node 0; " +
		"0000:83:00.0: 3 of 4 allocated, NUMA node 1; 0000:c3:00.0: 0 of 4 allocated, NUMA node -1)"
	if !errors.Is(err, ErrNoCapacity) || err.Error() != want {
		t.Errorf("node 1 full:\n got %v\nwant %s", err, want)
	}
	// Without the node, the same request is served by the least-loaded GPUs.
	rq.NUMANode = nil
	if got := ids(r.allocate(t, rq, host)); got != "0000:03:00.1 0000:c3:00.1" {
		t.Errorf("any node got %s", got)
	}
}

func TestIdempotent(t *testing.T) {
	r := newRig(t)
	host := twoMI25()
	first := r.allocate(t, req(0, 2), host)
	r.clock.Add(time.Minute)
	again := r.allocate(t, req(0, 2), host)
	if ids(again) != ids(first) || !again[0].Since.Equal(first[0].Since) {
		t.Errorf("asked again: %s, want %s unchanged", ids(again), ids(first))
	}
	// A larger count tops up; a rename is recorded.
	rq := req(0, 3)
	rq.DomainName = "renamed"
	more := r.allocate(t, rq, host)
	if len(more) != 3 || !strings.Contains(ids(more), first[0].VGPU) || !strings.Contains(ids(more), first[1].VGPU) {
		t.Errorf("topped up: %s", ids(more))
	}
	for _, a := range more {
		if a.DomainName != "renamed" {
			t.Errorf("%s still names %s", a.VGPU, a.DomainName)
		}
	}
	// Upper case is the same domain.
	rq.DomainUUID = strings.ToUpper(rq.DomainUUID)
	if got := r.allocate(t, rq, host); ids(got) != ids(more) {
		t.Errorf("upper-case UUID: %s", ids(got))
	}
	_, err := r.a.Allocate(context.Background(), req(0, 1), host)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "already holds 3 x mi25-4g, more than the 1 asked") {
		t.Errorf("smaller count: %v", err)
	}
	// Another profile is another request.
	t4 := vfs("0000:3b:00.0", 0, 4, "t4-4q")
	rq = req(0, 1)
	rq.Profile = "t4-4q"
	if got := r.allocate(t, rq, append(host, t4...)); ids(got) != "0000:3b:00.1" {
		t.Errorf("second profile: %s", ids(got))
	}
	if all, _ := r.l.Allocations(); len(all) != 4 {
		t.Errorf("%d allocations, want 4", len(all))
	}
}

func TestRequestErrors(t *testing.T) {
	r := newRig(t)
	host := vfs("0000:03:00.0", 0, 4, "mi25-4g")
	for i := range 3 {
		r.allocate(t, req(i, 1), host)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Request)
		kinds []error
		msg   string
	}{
		{"not enough", func(r *Request) { r.Count = 2 }, []error{ErrNoCapacity},
			"need 2 x mi25-4g, 1 free on this host (0000:03:00.0: 3 of 4 allocated)"},
		{"unknown profile", func(r *Request) { r.Profile = "mi25-3g" }, []error{ErrUnknownProfile, profile.ErrUnknownProfile},
			`unknown profile "mi25-3g"; profiles on this host: mi25-4g`},
		{"profile on no GPU here", func(r *Request) { r.Profile = "t4-4q" }, []error{ErrNoCapacity},
			"need 1 x t4-4q, but no GPU on this host carries t4-4q (is it in the host config? vgpuctl apply)"},
		{"no profile", func(r *Request) { r.Profile = "" }, []error{ErrInvalid, ErrUnknownProfile}, "no profile given"},
		{"count 0", func(r *Request) { r.Count = 0 }, []error{ErrInvalid, ErrBadCount}, "count 0 is out of range; allowed: 1 to 64"},
		{"count 65", func(r *Request) { r.Count = 65 }, []error{ErrInvalid, ErrBadCount}, "count 65 is out of range"},
		{"uuid garbage", func(r *Request) { r.DomainUUID = "web01" }, []error{ErrInvalid, ErrBadDomainUUID}, `domain UUID "web01" is not a UUID`},
		{"uuid without dashes", func(r *Request) { r.DomainUUID = "4dea22b31d52d8f32516782e98ab3fa0" }, []error{ErrBadDomainUUID}, "is not a UUID"},
		{"uuid urn", func(r *Request) { r.DomainUUID = "urn:uuid:4dea22b3-1d52-d8f3-2516-782e98ab3fa0" }, []error{ErrBadDomainUUID}, "is not a UUID"},
		{"uuid nil", func(r *Request) { r.DomainUUID = "00000000-0000-0000-0000-000000000000" }, []error{ErrBadDomainUUID}, "the nil UUID"},
		{"uuid path", func(r *Request) { r.DomainUUID = "../../../etc/passwd" }, []error{ErrBadDomainUUID}, "is not a UUID"},
		{"name empty", func(r *Request) { r.DomainName = "" }, []error{ErrInvalid, ErrBadDomainName}, "the domain name is empty"},
		{"name slash", func(r *Request) { r.DomainName = "../etc/x" }, []error{ErrInvalid, ErrBadDomainName}, `domain name "../etc/x" contains '/'`},
		{"name dot", func(r *Request) { r.DomainName = "." }, []error{ErrBadDomainName}, "is a path, not a name"},
		{"name dotdot", func(r *Request) { r.DomainName = ".." }, []error{ErrBadDomainName}, "is a path, not a name"},
		{"name NUL", func(r *Request) { r.DomainName = "vm\x00" }, []error{ErrBadDomainName}, "contains '/', NUL or a newline"},
		{"name newline", func(r *Request) { r.DomainName = "vm\nINFO forged" }, []error{ErrBadDomainName}, "contains '/', NUL or a newline"},
		{"name 248 bytes", func(r *Request) { r.DomainName = strings.Repeat("a", 248) }, []error{ErrInvalid, ErrBadDomainName},
			`domain name "` + strings.Repeat("a", 32) + `"... is 248 bytes long; libvirt's names are at most 247`},
		{"name 1 MiB", func(r *Request) { r.DomainName = strings.Repeat("é", 1<<19) }, []error{ErrBadDomainName},
			`domain name "` + strings.Repeat("é", 16) + `"... is 1048576 bytes long`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rq := req(9, 1)
			tc.edit(&rq)
			got, err := r.a.Allocate(context.Background(), rq, host)
			if err == nil {
				t.Fatalf("no error; got %s", ids(got))
			}
			for _, k := range tc.kinds {
				if !errors.Is(err, k) {
					t.Errorf("error does not match %v: %v", k, err)
				}
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
			if _, err := r.a.Lease(context.Background(), rq, host, time.Minute); err == nil {
				t.Error("Lease accepted the same request")
			}
		})
	}
	if all, _ := r.l.Allocations(); len(all) != 3 {
		t.Errorf("refused requests wrote: %d allocations", len(all))
	}
	if leases, _ := r.l.Leases(); len(leases) != 0 {
		t.Errorf("refused requests wrote leases: %+v", leases)
	}
	for _, bad := range []string{"", "web01", "0000:03:00", "../x"} {
		if _, _, err := r.a.ReleaseVGPU(context.Background(), bad); !errors.Is(err, ErrBadVGPU) || !errors.Is(err, ErrInvalid) {
			t.Errorf("ReleaseVGPU(%q): %v", bad, err)
		}
	}
	for _, bad := range []string{"", "web01"} {
		if _, err := r.a.ReleaseDomain(context.Background(), bad); !errors.Is(err, ErrBadDomainUUID) {
			t.Errorf("ReleaseDomain(%q): %v", bad, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.a.Allocate(ctx, req(9, 1), host); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestDomainNameLength: the longest name libvirt keeps passes, one byte
// more does not.
func TestDomainNameLength(t *testing.T) {
	if err := DomainName(strings.Repeat("a", MaxDomainName)); err != nil {
		t.Errorf("a %d-byte name: %v", MaxDomainName, err)
	}
	if err := DomainName(strings.Repeat("a", MaxDomainName+1)); !errors.Is(err, ErrBadDomainName) {
		t.Errorf("a %d-byte name: %v; want ErrBadDomainName", MaxDomainName+1, err)
	}
}

func TestSkipsInUseAndOtherProfiles(t *testing.T) {
	r := newRig(t)
	host := slices.Concat(vfs("0000:03:00.0", 0, 2, "mi25-4g"), vfs("0000:83:00.0", 0, 2, "mi25-2g"))
	host[0].InUse, host[0].Holder = true, "/dev/vfio/12 is open"
	if got := ids(r.allocate(t, req(0, 1), host)); got != "0000:03:00.2" {
		t.Errorf("got %s", got)
	}
	_, err := r.a.Allocate(context.Background(), req(1, 1), host)
	if want := "need 1 x mi25-4g, 0 free on this host (0000:03:00.0: 1 of 2 allocated, 1 in use outside vgpud)"; err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

func TestLeaseBecomesAllocation(t *testing.T) {
	r := newRig(t)
	host := twoMI25()
	ctx := context.Background()
	leases, err := r.a.Lease(ctx, req(0, 2), host, time.Minute)
	if err != nil || len(leases) != 2 || leases[0].VGPU != "0000:03:00.1" || !leases[0].Expires.Equal(r.clock.Now().Add(time.Minute)) {
		t.Fatalf("Lease = %+v, %v", leases, err)
	}
	// Idempotent, and a repeat extends the expiry.
	r.clock.Add(30 * time.Second)
	again, err := r.a.Lease(ctx, req(0, 2), host, time.Minute)
	if err != nil || again[0].VGPU != leases[0].VGPU || !again[0].Expires.Equal(r.clock.Now().Add(time.Minute)) {
		t.Errorf("Lease again = %+v, %v", again, err)
	}
	// Others cannot have the leased vGPUs. The leased ones count as
	// load, so the next goes to the first GPU's next VF.
	if got := ids(r.allocate(t, req(1, 1), host)); got != "0000:03:00.2" {
		t.Errorf("other domain got %s", got)
	}
	// The domain arrives: its leases become its allocations.
	got := r.allocate(t, req(0, 2), host)
	if ids(got) != "0000:03:00.1 0000:83:00.1" {
		t.Errorf("arrived domain got %s", ids(got))
	}
	if ls, _ := r.l.Leases(); len(ls) != 0 {
		t.Errorf("leases left after arrival: %+v", ls)
	}
	if _, err := r.a.Lease(ctx, req(0, 2), host, time.Minute); !errors.Is(err, ErrConflict) {
		t.Errorf("lease for a domain already here: %v", err)
	}
	if _, err := r.a.Lease(ctx, req(5, 1), host, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("lease of 0s: %v", err)
	}
}

func TestLeaseExpires(t *testing.T) {
	r := newRig(t)
	host := vfs("0000:03:00.0", 0, 2, "mi25-4g")
	ctx := context.Background()
	if _, err := r.a.Lease(ctx, req(0, 2), host, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := r.a.Allocate(ctx, req(1, 1), host); !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), "2 leased") {
		t.Errorf("all leased: %v", err)
	}
	r.clock.Add(time.Minute)
	if got := ids(r.allocate(t, req(1, 2), host)); got != "0000:03:00.1 0000:03:00.2" {
		t.Errorf("after expiry got %s", got)
	}
	// The late arrival finds its lease gone and the vGPUs taken.
	if _, err := r.a.Allocate(ctx, req(0, 1), host); !errors.Is(err, ErrNoCapacity) {
		t.Errorf("late arrival: %v", err)
	}
	dropped, err := r.a.DropLeases(ctx, uuidN(0))
	if err != nil || len(dropped) != 0 {
		t.Errorf("DropLeases of expired ones = %+v, %v", dropped, err)
	}
}

func TestDropLeases(t *testing.T) {
	r := newRig(t)
	host := twoMI25()
	ctx := context.Background()
	for i := range 2 {
		if _, err := r.a.Lease(ctx, req(i, 2), host, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	dropped, err := r.a.DropLeases(ctx, uuidN(0))
	if err != nil || len(dropped) != 2 {
		t.Errorf("DropLeases = %+v, %v", dropped, err)
	}
	if ls, _ := r.l.Leases(); len(ls) != 2 || ls[0].DomainUUID != uuidN(1) {
		t.Errorf("leases left = %+v", ls)
	}
}

func TestLifecycle(t *testing.T) {
	r := newRig(t)
	host := twoMI25()
	ctx := context.Background()
	d := uuidN(0)
	r.allocate(t, req(0, 2), host)
	if _, err := r.a.Attach(ctx, uuidN(7)); !errors.Is(err, ErrNotAllocated) {
		t.Errorf("Attach of a domain holding nothing: %v", err)
	}
	att, err := r.a.Attach(ctx, strings.ToUpper(d))
	if err != nil || len(att) != 2 || att[0].State != ledger.StateAttached {
		t.Fatalf("Attach = %+v, %v", att, err)
	}
	if h, in, _ := r.l.Holder(ctx, att[0].VGPU); !in || h != "attached to domain vm0 ("+d+")" {
		t.Errorf("Holder = %q, %v", h, in)
	}
	rel, err := r.a.BeginRelease(ctx, d)
	if err != nil || len(rel) != 2 || rel[0].State != ledger.StateReleasing {
		t.Fatalf("BeginRelease = %+v, %v", rel, err)
	}
	// The domain starts again before the release finished: it gets other
	// vGPUs, never one the release may be destroying.
	again := r.allocate(t, req(0, 2), host)
	if ids(again) == ids(rel) || strings.Contains(ids(again), rel[0].VGPU) || strings.Contains(ids(again), rel[1].VGPU) {
		t.Errorf("restart got %s while %s are releasing", ids(again), ids(rel))
	}
	done, err := r.a.FinishRelease(ctx, d)
	if err != nil || ids(done) != ids(rel) {
		t.Errorf("FinishRelease = %s, %v; want %s", ids(done), err, ids(rel))
	}
	left, _ := r.l.Allocations()
	if ids(left) != ids(again) {
		t.Errorf("left after FinishRelease: %s, want %s", ids(left), ids(again))
	}
	gone, err := r.a.ReleaseDomain(ctx, d)
	if err != nil || ids(gone) != ids(again) {
		t.Errorf("ReleaseDomain = %s, %v", ids(gone), err)
	}
	if gone, err := r.a.ReleaseDomain(ctx, d); err != nil || len(gone) != 0 {
		t.Errorf("second ReleaseDomain = %s, %v", ids(gone), err)
	}
	if left, _ := r.l.Allocations(); len(left) != 0 {
		t.Errorf("left after ReleaseDomain: %s", ids(left))
	}
	r.allocate(t, req(1, 1), host)
	al, ok, err := r.a.ReleaseVGPU(ctx, "0000:03:00.1")
	if err != nil || !ok || al.DomainUUID != uuidN(1) {
		t.Errorf("ReleaseVGPU = %+v, %v, %v", al, ok, err)
	}
	if _, ok, err := r.a.ReleaseVGPU(ctx, "0000:03:00.1"); ok || err != nil {
		t.Errorf("second ReleaseVGPU = %v, %v", ok, err)
	}
}

// TestConcurrentAllocateRelease: 200 goroutines race for 16 vGPUs, each
// allocating (1 or 2, retrying while none are free), holding briefly and
// releasing. Nobody may ever get a vGPU someone else holds, every one must
// eventually be served, and nothing may be left allocated. Every tenth
// domain asks twice at once, which must give it one set of vGPUs.
func TestConcurrentAllocateRelease(t *testing.T) {
	r := newRig(t)
	host := slices.Concat(vfs("0000:03:00.0", 0, 4, "mi25-4g"), vfs("0000:43:00.0", 0, 4, "mi25-4g"),
		vfs("0000:83:00.0", 1, 4, "mi25-4g"), vfs("0000:c3:00.0", 1, 4, "mi25-4g"))
	const workers = 200
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var mu sync.Mutex
	holder := map[string]int{} // vGPU -> the worker that believes it holds it
	var violations []string
	claim := func(w int, got []ledger.Allocation) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range got {
			if h, taken := holder[a.VGPU]; taken && h != w {
				violations = append(violations, fmt.Sprintf("%s given to worker %d while worker %d holds it", a.VGPU, w, h))
			}
			holder[a.VGPU] = w
		}
	}
	unclaim := func(got []ledger.Allocation) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range got {
			delete(holder, a.VGPU)
		}
	}
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		violations = append(violations, fmt.Sprintf(format, args...))
	}

	// A watcher checks the ledger while the workers run.
	stop := make(chan struct{})
	watched := make(chan int)
	go func() {
		n := 0
		defer func() { watched <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			err := r.l.View(func(tx *ledger.Tx) error {
				all, err := tx.Allocations()
				if err != nil {
					return err
				}
				if len(all) > len(host) {
					return fmt.Errorf("%d allocations for %d vGPUs", len(all), len(host))
				}
				perDomain := map[string]int{}
				for _, a := range all {
					perDomain[a.DomainUUID]++
				}
				for d, c := range perDomain {
					if c > 2 {
						return fmt.Errorf("domain %s holds %d vGPUs, asked for at most 2", d, c)
					}
				}
				return nil
			})
			if err != nil {
				fail("watcher: %v", err)
				return
			}
			n++
			time.Sleep(time.Millisecond)
		}
	}()

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rq := req(w, 1+w%2)
			var got []ledger.Allocation
			for {
				var err error
				if w%10 == 0 {
					got, err = allocateTwiceAtOnce(ctx, r.a, rq, host)
				} else {
					got, err = r.a.Allocate(ctx, rq, host)
				}
				if err == nil {
					break
				}
				if !errors.Is(err, ErrNoCapacity) {
					fail("worker %d: %v", w, err)
					return
				}
				time.Sleep(time.Duration(1+w%5) * time.Millisecond)
			}
			if len(got) != rq.Count {
				fail("worker %d asked for %d, got %s", w, rq.Count, ids(got))
			}
			claim(w, got)
			time.Sleep(time.Duration(w%3) * time.Millisecond)
			unclaim(got) // before the release: after it, others may rightly have them
			var err error
			if w%2 == 0 {
				_, err = r.a.ReleaseDomain(ctx, rq.DomainUUID)
			} else {
				for _, a := range got {
					if _, ok, e := r.a.ReleaseVGPU(ctx, a.VGPU); e != nil || !ok {
						err = errors.Join(err, e, fmt.Errorf("%s was not allocated", a.VGPU))
					}
				}
			}
			if err != nil {
				fail("worker %d release: %v", w, err)
			}
		})
	}
	wg.Wait()
	close(stop)
	checks := <-watched

	for _, v := range violations {
		t.Error(v)
	}
	if all, err := r.l.Allocations(); err != nil || len(all) != 0 {
		t.Errorf("leaked: %s (%v)", ids(all), err)
	}
	if len(holder) != 0 {
		t.Errorf("workers still hold %v", holder)
	}
	t.Logf("%d workers served, watcher checked the ledger %d times", workers, checks)
}

// allocateTwiceAtOnce sends the same request twice concurrently; both must
// return the same vGPUs.
func allocateTwiceAtOnce(ctx context.Context, a *Allocator, rq Request, host []Candidate) ([]ledger.Allocation, error) {
	var wg sync.WaitGroup
	var got [2][]ledger.Allocation
	var errs [2]error
	for i := range 2 {
		wg.Go(func() { got[i], errs[i] = a.Allocate(ctx, rq, host) })
	}
	wg.Wait()
	switch {
	case errs[0] != nil && errs[1] != nil:
		return nil, errs[0]
	case errs[0] != nil:
		// The other may have won the last free vGPUs: that is fine.
		if !errors.Is(errs[0], ErrNoCapacity) {
			return nil, errs[0]
		}
		return got[1], nil
	case errs[1] != nil:
		if !errors.Is(errs[1], ErrNoCapacity) {
			return nil, errs[1]
		}
		return got[0], nil
	}
	if ids(got[0]) != ids(got[1]) {
		return nil, fmt.Errorf("the same request twice got %s and %s", ids(got[0]), ids(got[1]))
	}
	return got[0], nil
}

func BenchmarkAllocateRelease(b *testing.B) {
	r := newRig(b)
	host := slices.Concat(vfs("0000:03:00.0", 0, 16, "mi25-1g"), vfs("0000:83:00.0", 1, 16, "mi25-1g"))
	rq := Request{Profile: "mi25-1g", Count: 1, DomainUUID: uuidN(0), DomainName: "bench"}
	ctx := context.Background()
	for b.Loop() {
		if _, err := r.a.Allocate(ctx, rq, host); err != nil {
			b.Fatal(err)
		}
		if _, err := r.a.ReleaseDomain(ctx, rq.DomainUUID); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWouldLease: a dry-run lease answers with what Lease would choose, or
// its refusal, and writes nothing.
func TestWouldLease(t *testing.T) {
	r := newRig(t)
	host := vfs("0000:03:00.0", 0, 2, "mi25-4g")
	ctx := context.Background()
	would, err := r.a.WouldLease(ctx, req(0, 2), host, time.Minute)
	if err != nil || leaseIDs(would) != "0000:03:00.1 0000:03:00.2" {
		t.Fatalf("WouldLease = %+v, %v", would, err)
	}
	if ls, _ := r.l.Leases(); len(ls) != 0 {
		t.Fatalf("a dry run wrote leases: %+v", ls)
	}
	r.allocate(t, req(1, 1), host)
	_, err = r.a.WouldLease(ctx, req(0, 2), host, time.Minute)
	if want := "need 2 x mi25-4g, 1 free on this host"; !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), want) {
		t.Errorf("WouldLease of 2 with 1 free = %v; want %q", err, want)
	}
	real, err := r.a.Lease(ctx, req(0, 1), host, time.Minute)
	if err != nil || leaseIDs(real) != "0000:03:00.2" {
		t.Fatalf("Lease after the dry runs = %+v, %v", real, err)
	}
}

func leaseIDs(ls []ledger.Lease) string {
	var s []string
	for _, l := range ls {
		s = append(s, l.VGPU)
	}
	return strings.Join(s, " ")
}
