package ledger

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

func TestCarved(t *testing.T) {
	clk := newClock()
	l := open(t, filepath.Join(t.TempDir(), "ledger.db"), WithClock(clk.Now))
	t4 := pci.MustParseAddress("0000:3b:00.0")
	if err := l.PutCarved(vgpu.GPU(t4), "t4-4q"); err != nil {
		t.Fatal(err)
	}
	first := clk.Now()
	clk.Add(time.Hour)
	if err := l.PutCarved(vgpu.GPU(gpu0), "mi25-4g"); err != nil {
		t.Fatal(err)
	}
	// The same profile again keeps its Since; another restamps it.
	if err := l.PutCarved(vgpu.GPU(t4), "t4-4q"); err != nil {
		t.Fatal(err)
	}
	got, err := l.CarvedGPUs()
	if err != nil || len(got) != 2 || got[0].GPU != gpu0 || got[1].GPU != t4 || !got[1].Since.Equal(first) {
		t.Fatalf("CarvedGPUs = %+v, %v", got, err)
	}
	if err := l.PutCarved(vgpu.GPU(t4), "t4-2q"); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.CarvedGPUs(); got[1].Profile != "t4-2q" || !got[1].Since.Equal(clk.Now()) {
		t.Fatalf("after a profile change: %+v", got)
	}
	if err := l.DeleteCarved(vgpu.GPU(t4)); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteCarved(vgpu.GPU(t4)); err != nil { // idempotent
		t.Fatal(err)
	}
	if got, _ := l.CarvedGPUs(); len(got) != 1 || got[0].GPU != gpu0 {
		t.Fatalf("after delete: %+v", got)
	}
}

// TestCarvedOnDisk pins the carved bucket's keys and records as vgpud
// has always written them (a GPU by its address, a virtual parent under
// "parent/" with a zero GPU), so a ledger from an earlier vgpud loads.
func TestCarvedOnDisk(t *testing.T) {
	l := open(t, filepath.Join(t.TempDir(), "ledger.db"), WithClock(newClock().Now))
	t4 := vgpu.GPU(pci.MustParseAddress("0000:3b:00.0"))
	mbochs := vgpu.Parent("mbochs")
	want := map[string]string{
		"0000:3b:00.0":  `{"gpu":"0000:3b:00.0","profile":"t4-4q","since":"2025-03-01T12:00:00Z"}`,
		"parent/mbochs": `{"gpu":"0000:00:00.0","parent":"mbochs","profile":"lab-mbochs-64m","since":"2025-03-01T12:00:00Z"}`,
	}
	raw := func() map[string]string {
		t.Helper()
		got := map[string]string{}
		if err := l.db.View(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte(bucketCarved)).ForEach(func(k, v []byte) error {
				got[string(k)] = string(v)
				return nil
			})
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if err := l.PutCarved(t4, "t4-4q"); err != nil {
		t.Fatal(err)
	}
	if err := l.PutCarved(mbochs, "lab-mbochs-64m"); err != nil {
		t.Fatal(err)
	}
	if got := raw(); !maps.Equal(got, want) {
		t.Fatalf("carved bucket = %q, want %q", got, want)
	}
	got, err := l.CarvedGPUs()
	if err != nil || len(got) != 2 || got[0].Target() != t4 || got[1].Target() != mbochs {
		t.Fatalf("CarvedGPUs = %+v, %v; want the GPU's record, then the parent's", got, err)
	}
	if err := l.DeleteCarved(mbochs); err != nil {
		t.Fatal(err)
	}
	delete(want, "parent/mbochs")
	if got := raw(); !maps.Equal(got, want) {
		t.Fatalf("after deleting the parent's record: %q, want %q", got, want)
	}
}

func TestIntentData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	type swap struct{ From, To string }
	var id uint64
	err = l.Update(func(tx *Tx) error {
		id, err = tx.BeginIntentData(IntentMdevSwap, gpu0, "web01", swap{From: "a", To: "b"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = open(t, path)
	got, err := l.OpenIntents()
	if err != nil || len(got) != 1 || got[0].ID != id || got[0].Kind != IntentMdevSwap {
		t.Fatalf("OpenIntents = %+v, %v", got, err)
	}
	var s swap
	if err := json.Unmarshal(got[0].Data, &s); err != nil || s.From != "a" || s.To != "b" {
		t.Fatalf("data %s: %+v, %v", got[0].Data, s, err)
	}
}

// The autoprobe journal keeps each PF's value across a reopen, as a crash
// leaves it; a record without its value is an error, never "off".
func TestAutoprobeIntents(t *testing.T) {
	t4 := pci.MustParseAddress("0000:3b:00.0")
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	on, err := l.BeginAutoprobe(gpu0, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.BeginAutoprobe(t4, false); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = open(t, path)
	recs, err := l.OpenAutoprobes()
	if err != nil || len(recs) != 2 || recs[0].PF != gpu0 || !recs[0].Was || recs[1].PF != t4 || recs[1].Was {
		t.Fatalf("OpenAutoprobes = %+v, %v", recs, err)
	}
	if err := l.EndAutoprobe(on); err != nil {
		t.Fatal(err)
	}
	if recs, err := l.OpenAutoprobes(); err != nil || len(recs) != 1 || recs[0].PF != t4 {
		t.Fatalf("after EndAutoprobe: %+v, %v", recs, err)
	}
	if err := l.Update(func(tx *Tx) error {
		_, err := tx.BeginIntentData(IntentAutoprobe, gpu0, "planted", struct{}{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenAutoprobes(); err == nil || !strings.Contains(err.Error(), `no "was"`) {
		t.Fatalf("a record without its value: %v", err)
	}
}
