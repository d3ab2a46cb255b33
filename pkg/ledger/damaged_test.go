package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		// What a crash or a full disk while copying leaves, as issue 22.4
		// found them: bbolt maps such a file and dies of SIGBUS reading
		// the pages its meta names, or says only "file size too small".
		{"cut to 24 KiB", func(b []byte) []byte { return b[:24<<10] }},
		{"cut to 8 KiB", func(b []byte) []byte { return b[:8<<10] }},
		{"cut to 4 KiB", func(b []byte) []byte { return b[:4<<10] }},
		{"cut inside the first meta page", func(b []byte) []byte { return b[:40] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, good := filled(t)
			if used := inUse(t, good); used <= 24<<10 {
				t.Fatalf("the filled ledger uses %d bytes; the cuts need more than 24 KiB", used)
			}
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

// inUse is how much of a ledger file its latest meta page says is in use
// (its high-water mark times its page size).
func inUse(t *testing.T, b []byte) int64 {
	t.Helper()
	f := fileOf(t, b)
	m0, err0 := readMeta(f, 0)
	if err0 != nil {
		t.Fatal(err0)
	}
	m1, err1 := readMeta(f, m0.pageSize)
	if err1 == nil && m1.txid > m0.txid {
		m0 = m1
	}
	return int64(m0.pgid) * m0.pageSize
}

func fileOf(t *testing.T, b []byte) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// The check before the map says what is wrong, and lets pass what bbolt
// itself takes: a file whose free tail is gone, or one whose latest meta
// page was torn (bbolt falls back to the other).
func TestCheckFile(t *testing.T) {
	_, good := filled(t)
	page := int64(os.Getpagesize())
	used := inUse(t, good)
	for _, tc := range []struct {
		name string
		b    []byte
		want string // "" when the file passes
	}{
		{"as written", good, ""},
		{"free tail cut", good[:used], ""},
		{"one page short", good[:used-page], "says it holds"},
		{"half", good[:len(good)/2], "it was cut short"},
		{"4 KiB", good[:4<<10], "shorter than its two meta pages"},
		{"torn meta page 0", tear(good, 0), ""},
		{"torn meta page 1", tear(good, page), ""},
		{"both metas torn", tear(tear(good, 0), page), "neither meta page is valid"},
		{"no bbolt file", bytes.Repeat([]byte("not a ledger "), 1000), "page 0: no bbolt magic number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkFile(fileOf(t, tc.b), int64(len(tc.b)))
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("checkFile = %v; want %q", err, tc.want)
			}
		})
	}
	// Those that pass open: cut to what is in use, it holds all it held;
	// torn, it holds the other meta page's transaction, as bbolt chooses.
	for i, b := range [][]byte{good[:used], tear(good, 0), tear(good, page)} {
		path := filepath.Join(t.TempDir(), "ledger.db")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := Open(path, WithReadOnly())
		if err != nil {
			t.Fatal(err)
		}
		as, err := l.Allocations()
		l.Close()
		if err != nil || i == 0 && len(as) != 40 {
			t.Fatalf("a ledger cut to the pages in use holds %d allocations (%v), want 40", len(as), err)
		}
	}
}

// tear spoils the checksum of the meta in the page at off.
func tear(b []byte, off int64) []byte {
	b = append([]byte(nil), b...)
	b[off+pageHeaderSize+metaSumOffset] ^= 0xFF
	return b
}

// A ledger another process holds is reported locked, not damaged, however
// its file reads meanwhile.
func TestCheckWaitsForTheLock(t *testing.T) {
	path, _ := filled(t)
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Open(path, WithReadOnly(), WithLockTimeout(100*time.Millisecond))
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("open of a held ledger: %v; want ErrLocked", err)
	}
}
