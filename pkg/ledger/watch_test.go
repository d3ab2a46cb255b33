package ledger

import (
	"errors"
	"path/filepath"
	"testing"
)

// OnCommit hears every committed write, not reads nor rolled-back writes,
// and nothing once removed.
func TestOnCommit(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := 0
	remove := l.OnCommit(func() { n++ })
	a := Allocation{VGPU: "0000:03:00.1", DomainUUID: "4dea22b3-1d52-d8f3-2516-782e98ab3fa0", State: StateReserved}
	if err := l.Update(func(tx *Tx) error { return tx.PutAllocation(a) }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Allocation(a.VGPU); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := l.Update(func(*Tx) error { return boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("hooks run %d times, want 1 (the committed write only)", n)
	}
	remove()
	if _, err := l.SetState(a.VGPU, StateAttached); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("hook removed, yet run: %d", n)
	}
}
