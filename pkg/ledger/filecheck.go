package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// bbolt's file layout (go.etcd.io/bbolt, internal/common): every page
// starts with a header (id uint64, flags uint16, count uint16, overflow
// uint32); pages 0 and 1 each hold a meta after it, whose checksum is
// FNV-64a of the fields before it. Values are in the host's byte order.
const (
	pageHeaderSize   = 16
	metaSize         = 64
	metaSumOffset    = 56 // the checksum's offset in the meta
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	noFreelist       = ^uint64(0)
	freelistPageFlag = 0x10
	// minPageSize and maxPageSize bound the page sizes bbolt looks for
	// its second meta at (1 KiB << 0..14).
	minPageSize = 1 << 10
	maxPageSize = 1 << 24
)

// boltMeta is what a meta page claims about the file.
type boltMeta struct {
	page     int64 // which meta page: 0 or 1
	pageSize int64
	root     uint64 // the root bucket's page
	freelist uint64 // the freelist's page, noFreelist when none
	pgid     uint64 // the high-water mark: pages [0, pgid) are in use
	txid     uint64
}

// readMeta decodes the meta in the page at off; an error says why it is
// not one bbolt would accept.
func readMeta(f *os.File, off int64) (boltMeta, error) {
	var b [pageHeaderSize + metaSize]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		if errors.Is(err, io.EOF) {
			return boltMeta{}, errors.New("the file ends before it")
		}
		return boltMeta{}, err
	}
	m := b[pageHeaderSize:]
	ne := binary.NativeEndian
	switch {
	case ne.Uint32(m[0:]) != boltMagic:
		return boltMeta{}, errors.New("no bbolt magic number")
	case ne.Uint32(m[4:]) != boltVersion:
		return boltMeta{}, fmt.Errorf("bbolt format version %d, not %d", ne.Uint32(m[4:]), boltVersion)
	}
	h := fnv.New64a()
	h.Write(m[:metaSumOffset])
	if h.Sum64() != ne.Uint64(m[metaSumOffset:]) {
		return boltMeta{}, errors.New("its checksum does not match")
	}
	return boltMeta{pageSize: int64(ne.Uint32(m[8:])), root: ne.Uint64(m[16:]), freelist: ne.Uint64(m[32:]),
		pgid: ne.Uint64(m[40:]), txid: ne.Uint64(m[48:])}, nil
}

// checkFile compares the file with what its meta pages claim, reading it
// (never mapping it): bbolt maps the file and reads what the metas point
// at, so a file cut short (a crash or a full disk while it was copied, a
// careless truncate) would kill the process with SIGBUS, which no recover
// catches. As bbolt does, it trusts the valid meta of the latest
// transaction and finds the page size in the first valid one.
func checkFile(f *os.File, size int64) error {
	if size == 0 {
		return errors.New("the file is empty (0 bytes: a crash or a full disk while it was written, or a bad restore)")
	}
	m0, err0 := readMeta(f, 0)
	pageSize := m0.pageSize
	if err0 != nil {
		// bbolt's search for the second meta, page size unknown.
		for ps := int64(minPageSize); ps <= maxPageSize && ps < size-minPageSize; ps <<= 1 {
			if m1, err := readMeta(f, ps); err == nil && m1.pageSize == ps {
				pageSize = ps
				break
			}
		}
	}
	if err0 != nil && pageSize == 0 {
		return fmt.Errorf("neither meta page is valid (page 0: %v; no valid second one at any page size bbolt uses)", err0)
	}
	switch {
	case pageSize < minPageSize || pageSize > maxPageSize || pageSize&(pageSize-1) != 0:
		return fmt.Errorf("its meta page claims a page size of %d bytes, which bbolt never writes", pageSize)
	case size < 2*pageSize:
		return fmt.Errorf("the file is %d bytes, shorter than its two meta pages (2 x %d bytes): it was cut short", size, pageSize)
	}
	// Found by page size, the second meta is valid when the first is not.
	m1, err1 := readMeta(f, pageSize)
	m1.page = 1
	m := m0
	if err1 == nil && (err0 != nil || m1.txid > m0.txid) {
		m = m1
	}
	if m.pageSize != pageSize {
		return fmt.Errorf("its meta pages disagree on the page size (%d and %d bytes)", pageSize, m.pageSize)
	}
	if m.pgid > uint64(size/pageSize) {
		return fmt.Errorf("the file is %d bytes, and its meta page %d (transaction %d) says it holds %d pages of %d bytes (%d bytes): it was cut short",
			size, m.page, m.txid, m.pgid, pageSize, int64(m.pgid)*pageSize)
	}
	if err := checkPage(f, pageSize, m, "root bucket", m.root); err != nil || m.freelist == noFreelist {
		return err
	}
	return checkPage(f, pageSize, m, "freelist", m.freelist)
}

// checkPage checks that page id, which meta m names as what, lies whole
// below m's high-water mark (its header's overflow included).
func checkPage(f *os.File, pageSize int64, m boltMeta, what string, id uint64) error {
	if id < 2 || id >= m.pgid {
		return fmt.Errorf("its meta page %d puts the %s at page %d, outside pages 2 to %d", m.page, what, id, m.pgid-1)
	}
	var h [pageHeaderSize]byte
	if _, err := f.ReadAt(h[:], int64(id)*pageSize); err != nil {
		return fmt.Errorf("read the %s's page %d: %w", what, id, err)
	}
	ne := binary.NativeEndian
	if got := ne.Uint64(h[0:]); got != id {
		return fmt.Errorf("the %s's page %d says it is page %d", what, id, got)
	}
	if what == "freelist" && ne.Uint16(h[8:])&freelistPageFlag == 0 {
		return fmt.Errorf("the freelist's page %d is not a freelist page (flags %#x)", id, ne.Uint16(h[8:]))
	}
	if last := id + uint64(ne.Uint32(h[12:])); last >= m.pgid {
		return fmt.Errorf("the %s's page %d runs to page %d, past the last page in use (%d)", what, id, last, m.pgid-1)
	}
	return nil
}

// precheck runs checkFile on path under the lock bbolt would take
// (shared when read-only), so that a vgpud writing the file meanwhile is
// never taken for damage. A file that does not exist passes: bbolt makes
// a new ledger of it, or refuses it read-only.
func precheck(path string, o options) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open ledger %s: %w", path, err)
	}
	defer f.Close()
	how := unix.LOCK_EX
	if o.readOnly {
		how = unix.LOCK_SH
	}
	for start := time.Now(); ; {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("open ledger %s: lock it: %w", path, err)
		}
		if o.timeout > 0 && time.Since(start) >= o.timeout {
			return lockedError(path, o.timeout)
		}
		time.Sleep(lockPoll)
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("open ledger %s: %w", path, err)
	}
	if err := checkFile(f, fi.Size()); err != nil {
		return fmt.Errorf("open ledger %s: %w: %w%s", path, ErrDamaged, err, damagedHelp)
	}
	return nil
}

// lockPoll is how often a locked ledger is tried again, as bbolt does.
const lockPoll = 50 * time.Millisecond

func lockedError(path string, timeout time.Duration) error {
	return fmt.Errorf("open ledger %s: %w: still locked after %s (is another vgpud running?)", path, ErrLocked, timeout)
}
