package ledger

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// OnCommit hears every committed write, with the vGPUs it wrote, not
// reads nor rolled-back writes, and nothing once removed.
func TestOnCommit(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := 0
	var last Commit
	remove := l.OnCommit(func(c Commit) { n, last = n+1, c })
	a := Allocation{VGPU: "0000:03:00.1", DomainUUID: "4dea22b3-1d52-d8f3-2516-782e98ab3fa0", State: StateReserved}
	lease := Lease{VGPU: "0000:03:00.2", DomainUUID: a.DomainUUID, Expires: time.Now().Add(time.Hour)}
	err = l.Update(func(tx *Tx) error {
		if _, err := tx.BeginIntent(IntentPodClaim, pci.Address{}, "claim"); err != nil {
			return err
		}
		if err := tx.PutAllocation(a); err != nil {
			return err
		}
		if _, err := tx.SetState(a.VGPU, StateAttached); err != nil {
			return err
		}
		return tx.PutLease(lease)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(last.VGPUs, []string{a.VGPU, lease.VGPU}) || last.Other {
		t.Errorf("commit %+v, want vGPUs [%s %s] and nothing else (an intent changes no holder)", last, a.VGPU, lease.VGPU)
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
	if err := l.Update(func(tx *Tx) error { return tx.PutCarved(vgpu.GPU(pci.MustParseAddress("0000:03:00.0")), "mi25-1g") }); err != nil {
		t.Fatal(err)
	}
	if n != 2 || len(last.VGPUs) != 0 || !last.Other {
		t.Errorf("after a carved record: %d commits, last %+v; want 2, the last naming no vGPU and Other", n, last)
	}
	remove()
	if _, err := l.SetState(a.VGPU, StateAttached); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("hook removed, yet run: %d", n)
	}
}
