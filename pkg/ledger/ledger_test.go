package ledger

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/vgpu-project/vgpu/internal/testclock"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

func newClock() *testclock.Clock { return testclock.New(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)) }

func open(t *testing.T, path string, opts ...Option) *Ledger {
	t.Helper()
	l, err := Open(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

const (
	dom1 = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
	dom2 = "8f5b7e2a-0c1d-4e3f-9a8b-7c6d5e4f3a2b"
)

var gpu0 = pci.MustParseAddress("0000:03:00.0")

func alloc(vgpu, domain string, st State) Allocation {
	return Allocation{VGPU: vgpu, GPU: gpu0, Profile: "mi25-4g", DomainUUID: domain, DomainName: "web01", State: st}
}

func TestOpenCreates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "var", "lib", "vgpud", "ledger.db")
	l := open(t, path)
	if l.Path() != path {
		t.Errorf("Path = %q", l.Path())
	}
	for p, mode := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v, %v; want mode %v", p, fi.Mode(), err, mode)
		}
	}
	err := l.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte(bucketMeta)).Get([]byte(keySchema)); string(v) != strconv.Itoa(SchemaVersion) {
			return fmt.Errorf("schema key = %q", v)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// Opening a ledger that is already initialised writes nothing: no
// transaction is committed (bbolt's txid stays), so no sync is paid.
func TestOpenInitialisedWritesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	txid := func() int {
		t.Helper()
		l := open(t, path)
		defer l.Close()
		var id int
		_ = l.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil })
		return id
	}
	first := txid()
	if again := txid(); again != first {
		t.Errorf("the second open committed %d transactions", again-first)
	}
	// A ledger that lacks a bucket (an older schema's file) is still completed.
	l := open(t, path)
	if err := l.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte(buckets()[len(buckets())-1])) }); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = open(t, path)
	defer l.Close()
	if err := l.db.View(func(tx *bolt.Tx) error {
		for _, b := range buckets() {
			if tx.Bucket([]byte(b)) == nil {
				return fmt.Errorf("bucket %s missing after open", b)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

func TestAllocations(t *testing.T) {
	clk := newClock()
	l := open(t, filepath.Join(t.TempDir(), "ledger.db"), WithClock(clk.Now))
	err := l.Update(func(tx *Tx) error {
		for _, a := range []Allocation{alloc("0000:03:00.2", dom1, StateReserved), alloc("0000:03:00.1", dom2, StateAttached)} {
			if err := tx.PutAllocation(a); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all, err := l.Allocations()
	if err != nil || len(all) != 2 || all[0].VGPU != "0000:03:00.1" || all[1].VGPU != "0000:03:00.2" {
		t.Fatalf("Allocations = %+v, %v", all, err)
	}
	if !all[0].Since.Equal(clk.Now()) || all[0].GPU != gpu0 || all[0].DomainUUID != dom2 || all[0].State != StateAttached {
		t.Errorf("allocation = %+v", all[0])
	}
	clk.Add(time.Minute)
	a, err := l.SetState("0000:03:00.2", StateAttached)
	if err != nil || a.State != StateAttached || !a.Since.Equal(clk.Now()) {
		t.Errorf("SetState = %+v, %v", a, err)
	}
	if a, ok, err := l.Allocation("0000:03:00.2"); err != nil || !ok || a.State != StateAttached {
		t.Errorf("Allocation = %+v, %v, %v", a, ok, err)
	}
	_, err = l.SetState("0000:03:00.7", StateAttached)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), l.Path()) || !strings.Contains(err.Error(), "0000:03:00.7") {
		t.Errorf("SetState of a free vGPU: %v", err)
	}
	err = l.Update(func(tx *Tx) error {
		mine, err := tx.DomainAllocations(dom1)
		if err != nil || len(mine) != 1 || mine[0].VGPU != "0000:03:00.2" {
			return fmt.Errorf("DomainAllocations = %+v, %v", mine, err)
		}
		if gone, ok, err := tx.DeleteAllocation("0000:03:00.2"); err != nil || !ok || gone.DomainUUID != dom1 {
			return fmt.Errorf("DeleteAllocation = %+v, %v, %v", gone, ok, err)
		}
		if _, ok, err := tx.DeleteAllocation("0000:03:00.2"); err != nil || ok {
			return fmt.Errorf("second DeleteAllocation = %v, %v", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	err = l.Update(func(tx *Tx) error { return tx.PutAllocation(Allocation{VGPU: "x", State: "gone"}) })
	if err == nil || !strings.Contains(err.Error(), l.Path()) {
		t.Errorf("incomplete allocation: %v", err)
	}
}

// TestUpdateAtomic: a failing transaction keeps nothing it wrote, and its
// error comes back unchanged for the caller to branch on.
func TestUpdateAtomic(t *testing.T) {
	l := open(t, filepath.Join(t.TempDir(), "ledger.db"))
	mine := errors.New("no capacity")
	err := l.Update(func(tx *Tx) error {
		if err := tx.PutAllocation(alloc("0000:03:00.1", dom1, StateReserved)); err != nil {
			return err
		}
		if _, err := tx.BeginIntent(IntentAllocate, gpu0, "x"); err != nil {
			return err
		}
		return mine
	})
	if err != mine {
		t.Errorf("Update = %v, want the callback's error itself", err)
	}
	if all, _ := l.Allocations(); len(all) != 0 {
		t.Errorf("rolled-back allocation kept: %+v", all)
	}
	if open, _ := l.OpenIntents(); len(open) != 0 {
		t.Errorf("rolled-back intent kept: %+v", open)
	}
	err = l.View(func(tx *Tx) error { return tx.PutAllocation(alloc("0000:03:00.1", dom1, StateReserved)) })
	if err == nil {
		t.Error("write in a read transaction succeeded")
	}
}

func TestLeases(t *testing.T) {
	clk := newClock()
	l := open(t, filepath.Join(t.TempDir(), "ledger.db"), WithClock(clk.Now))
	lease := func(vgpu string, ttl time.Duration) Lease {
		return Lease{VGPU: vgpu, GPU: gpu0, Profile: "mi25-4g", DomainUUID: dom1, DomainName: "web01", Expires: clk.Now().Add(ttl)}
	}
	for _, le := range []Lease{lease("0000:03:00.1", time.Minute), lease("0000:03:00.2", time.Hour)} {
		if err := l.PutLease(le); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := l.Leases(); err != nil || len(got) != 2 {
		t.Fatalf("Leases = %+v, %v", got, err)
	}
	holder, in, err := l.Holder(context.Background(), "0000:03:00.1")
	if err != nil || !in || !strings.HasPrefix(holder, "leased to incoming domain web01 ("+dom1+") until 2025-03-01T12:01:00Z") {
		t.Errorf("Holder = %q, %v, %v", holder, in, err)
	}

	clk.Add(time.Minute) // the first lease expires exactly now
	if _, ok, err := l.Lease("0000:03:00.1"); ok || err != nil {
		t.Errorf("expired lease still read: %v, %v", ok, err)
	}
	if got, _ := l.Leases(); len(got) != 1 || got[0].VGPU != "0000:03:00.2" {
		t.Errorf("Leases after expiry = %+v", got)
	}
	if _, in, _ := l.Holder(context.Background(), "0000:03:00.1"); in {
		t.Error("expired lease still holds its vGPU")
	}
	gone, err := l.SweepExpired(clk.Now())
	if err != nil || len(gone) != 1 || gone[0].VGPU != "0000:03:00.1" {
		t.Errorf("SweepExpired = %+v, %v", gone, err)
	}
	// Swept means gone from the file, not only hidden.
	err = l.View(func(tx *Tx) error {
		if n := tx.bucket(bucketLeases).Stats().KeyN; n != 1 {
			return fmt.Errorf("%d lease records left, want 1", n)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if gone, err := l.SweepExpired(clk.Now()); err != nil || len(gone) != 0 {
		t.Errorf("second sweep = %+v, %v", gone, err)
	}
	if err := l.DeleteLease("0000:03:00.2"); err != nil {
		t.Error(err)
	}
	if got, _ := l.Leases(); len(got) != 0 {
		t.Errorf("Leases after delete = %+v", got)
	}
	if err := l.PutLease(Lease{VGPU: "0000:03:00.3", DomainUUID: dom1}); err == nil {
		t.Error("lease without expiry accepted")
	}
}

func TestHolder(t *testing.T) {
	l := open(t, filepath.Join(t.TempDir(), "ledger.db"))
	for _, tc := range []struct {
		state  State
		in     bool
		holder string
	}{
		{StateReserved, true, "reserved for domain web01 (" + dom1 + ")"},
		{StateAttached, true, "attached to domain web01 (" + dom1 + ")"},
		{StateReleasing, false, ""},
	} {
		if err := l.Update(func(tx *Tx) error { return tx.PutAllocation(alloc("0000:03:00.1", dom1, tc.state)) }); err != nil {
			t.Fatal(err)
		}
		holder, in, err := l.Holder(context.Background(), "0000:03:00.1")
		if err != nil || in != tc.in || holder != tc.holder {
			t.Errorf("%s: Holder = %q, %v, %v; want %q, %v", tc.state, holder, in, err, tc.holder, tc.in)
		}
	}
	if holder, in, err := l.Holder(context.Background(), "0000:03:00.5"); in || holder != "" || err != nil {
		t.Errorf("free vGPU: Holder = %q, %v, %v", holder, in, err)
	}
}

func TestIntentsSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	clk := newClock()
	l, err := Open(path, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, k := range []IntentKind{IntentCarve, IntentAllocate, IntentRelease} {
		id, err := l.BeginIntent(k, gpu0, "mi25-4g")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := l.EndIntent(ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil { // a clean stop; a kill -9 is TestKilledWriter
		t.Fatal(err)
	}

	l = open(t, path)
	got, err := l.OpenIntents()
	if err != nil || len(got) != 2 {
		t.Fatalf("OpenIntents = %+v, %v", got, err)
	}
	if got[0].ID != ids[0] || got[0].Kind != IntentCarve || got[0].GPU != gpu0 || got[0].Detail != "mi25-4g" ||
		!got[0].Started.Equal(clk.Now()) || got[1].ID != ids[2] || got[1].Kind != IntentRelease {
		t.Errorf("OpenIntents = %+v", got)
	}
	if s := got[0].String(); s != "#1 carve on 0000:03:00.0: mi25-4g (started 2025-03-01T12:00:00Z)" {
		t.Errorf("String = %q", s)
	}
	// Ids are never reused, even after a reopen.
	id, err := l.BeginIntent(IntentUncarve, pci.Address{}, "")
	if err != nil || id <= ids[2] {
		t.Errorf("BeginIntent after reopen = %d, %v", id, err)
	}
	for _, id := range []uint64{ids[0], ids[0], ids[2], id} { // twice: ending is idempotent
		if err := l.EndIntent(id); err != nil {
			t.Error(err)
		}
	}
	if got, _ := l.OpenIntents(); len(got) != 0 {
		t.Errorf("OpenIntents after ending all = %+v", got)
	}
}

func TestSecondOpenFailsFast(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	open(t, path)
	start := time.Now()
	_, err := Open(path, WithLockTimeout(200*time.Millisecond))
	took := time.Since(start)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "another vgpud") {
		t.Errorf("second Open: %v", err)
	}
	// bbolt polls the lock every 50ms and gives up within one poll of it.
	if took < 150*time.Millisecond || took > 5*time.Second {
		t.Errorf("second Open took %s with a 200ms timeout", took)
	}
	if _, err := Open(path, WithReadOnly(), WithLockTimeout(50*time.Millisecond)); !errors.Is(err, ErrLocked) {
		t.Errorf("read-only Open beside a writer: %v", err)
	}
}

func TestReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	if _, err := Open(path, WithReadOnly()); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("read-only Open of a missing ledger: %v", err)
	}
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Update(func(tx *Tx) error { return tx.PutAllocation(alloc("0000:03:00.1", dom1, StateAttached)) }); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Two readers at once: the lock is shared.
	r1, r2 := open(t, path, WithReadOnly()), open(t, path, WithReadOnly())
	for _, r := range []*Ledger{r1, r2} {
		if all, err := r.Allocations(); err != nil || len(all) != 1 {
			t.Errorf("read-only Allocations = %+v, %v", all, err)
		}
	}
	if err := r1.PutLease(Lease{VGPU: "a", DomainUUID: dom1, Expires: time.Now().Add(time.Hour)}); err == nil ||
		!strings.Contains(err.Error(), path) {
		t.Errorf("write to a read-only ledger: %v", err)
	}
}

func TestSchemaMismatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte(bucketMeta))
		if err != nil {
			return err
		}
		return b.Put([]byte(keySchema), []byte("2"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]Option{nil, {WithReadOnly()}} {
		if _, err := Open(path, opts...); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), path) ||
			!strings.Contains(err.Error(), `schema version "2"`) {
			t.Errorf("Open of a newer ledger: %v", err)
		}
	}
}

func TestDriverStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := open(t, path)
	a := pci.MustParseAddress("0000:86:00.0")
	if d, ok, err := l.OriginalDriver(a); ok || d != "" || err != nil {
		t.Errorf("nothing remembered: %q, %v, %v", d, ok, err)
	}
	if err := l.RememberDriver(a, "nvidia"); err != nil {
		t.Fatal(err)
	}
	// A carve repeated after a crash finds the device on vfio-pci: that
	// must not replace its own driver.
	if err := l.RememberDriver(a, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	if d, ok, err := l.OriginalDriver(a); d != "nvidia" || !ok || err != nil {
		t.Errorf("OriginalDriver = %q, %v, %v", d, ok, err)
	}
	if err := l.ForgetDriver(a); err != nil {
		t.Fatal(err)
	}
	if err := l.ForgetDriver(a); err != nil { // forgetting twice is fine
		t.Fatal(err)
	}
	if err := l.RememberDriver(a, "nouveau"); err != nil {
		t.Fatal(err)
	}
	if d, _, _ := l.OriginalDriver(a); d != "nouveau" {
		t.Errorf("after forget and remember: %q", d)
	}
}

// TestKilledWriter kills a process that commits allocations as fast as it
// can, at a random moment, and checks the ledger it leaves: it opens, the
// page structure is intact, and every record decodes (no torn write).
func TestKilledWriter(t *testing.T) {
	if path := os.Getenv("LEDGER_TEST_WRITER"); path != "" {
		writeForever(path)
		return
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	for round := range 5 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKilledWriter$")
		cmd.Env = append(os.Environ(), "LEDGER_TEST_WRITER="+path)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(100+round*37) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()

		l, err := Open(path)
		if err != nil {
			t.Fatalf("round %d: reopen after kill -9: %v", round, err)
		}
		err = l.View(func(tx *Tx) error {
			var broken []error
			for err := range tx.tx.Check() { // drain: Check's goroutine sends them all
				broken = append(broken, err)
			}
			if len(broken) > 0 {
				return errors.Join(broken...)
			}
			all, err := tx.Allocations()
			if err != nil {
				return err
			}
			intents, err := tx.OpenIntents()
			if err != nil {
				return err
			}
			// The writer begins an intent and writes its allocation in one
			// transaction, and ends it with the next: at most one is open.
			if len(intents) > 1 {
				return fmt.Errorf("%d intents open", len(intents))
			}
			t.Logf("round %d: %d allocations, %d intents open", round, len(all), len(intents))
			return nil
		})
		if err != nil {
			t.Errorf("round %d: %v", round, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// writeForever runs in the child of TestKilledWriter until it is killed.
func writeForever(path string) {
	l, err := Open(path, WithLockTimeout(10*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for i := 0; ; i++ {
		err := l.Update(func(tx *Tx) error {
			open, err := tx.OpenIntents()
			for _, in := range open {
				if err == nil {
					err = tx.EndIntent(in.ID)
				}
			}
			if err != nil {
				return err
			}
			if _, err := tx.BeginIntent(IntentAllocate, gpu0, strconv.Itoa(i)); err != nil {
				return err
			}
			return tx.PutAllocation(alloc(fmt.Sprintf("0000:03:%02x.%d", (i/8)%32, i%8), dom1, StateReserved))
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
}
