package ledgertest

import (
	"bytes"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Grow adds n bytes to the ledger at path, in a bucket of its own that vgpu
// neither reads nor checks beyond bbolt's page check: a ledger grown as a
// busy host's does, so that a cut to a given size loses pages in use.
func Grow(t testing.TB, path string, n int) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("test-growth"))
		if err != nil {
			return err
		}
		return b.Put([]byte("padding"), bytes.Repeat([]byte{'x'}, n))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("grow the ledger %s: %v", path, err)
	}
}

// InUse is how many bytes of the ledger at path bbolt uses: its
// high-water mark in pages times the page size. A cut to fewer loses
// pages in use.
func InUse(t testing.TB, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.View(func(tx *bolt.Tx) error {
		n = tx.Size()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// Cut is a ledger file cut short to Size(n) of its n bytes.
type Cut struct {
	Name string
	Size func(n int64) int64
}

// Cuts are the cuts issue 22.4 found killing vgpud with SIGBUS, or
// refused without advice (4 KiB); 24 KiB needs a ledger Grown past it.
func Cuts() []Cut {
	return []Cut{
		{"24 KiB", func(int64) int64 { return 24 << 10 }},
		{"half", func(n int64) int64 { return n / 2 }},
		{"8 KiB", func(int64) int64 { return 8 << 10 }},
		{"4 KiB", func(int64) int64 { return 4 << 10 }},
	}
}
