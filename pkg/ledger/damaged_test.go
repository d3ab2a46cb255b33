package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// filled writes a ledger with allocations and returns its path and bytes.
func filled(t *testing.T) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Update(func(tx *Tx) error {
		for i := range 40 {
			if err := tx.PutAllocation(alloc(fmt.Sprintf("0000:03:%02x.1", i), dom1, StateReserved)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, b
}

// A ledger vgpu cannot trust is refused with what to do, and never
// rewritten: an empty file (bbolt would make a new, empty ledger of it),
// damaged meta pages, damaged data pages (bbolt would panic on use).
func TestDamagedLedgerRefused(t *testing.T) {
	page := os.Getpagesize()
	for _, tc := range []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"empty", func([]byte) []byte { return nil }},
		{"both meta pages", func(b []byte) []byte {
			copy(b[0:2*page], bytes.Repeat([]byte{0xA5}, 2*page))
			return b
		}},
		{"data pages", func(b []byte) []byte {
			for p := 2; p*page < len(b); p++ { // every page past the metas: branch, leaf, freelist
				copy(b[p*page+16:p*page+64], bytes.Repeat([]byte{0xFF}, 48))
			}
			return b
		}},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, good := filled(t)
			bad := tc.damage(append([]byte(nil), good...))
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := Open(path)
			if err == nil {
				l.Close()
				t.Fatal("a damaged ledger opened")
			}
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "leaves it as it is") {
				t.Fatalf("open: %v; want ErrDamaged naming the file and what to do", err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, bad) {
				t.Fatal("the damaged ledger was rewritten")
			}
		})
	}
}
