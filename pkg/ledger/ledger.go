package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// DefaultPath is where vgpud keeps its ledger.
const DefaultPath = "/var/lib/vgpud/ledger.db"

// SchemaVersion is the layout this package reads and writes. A ledger
// written by a newer vgpud is refused rather than misread.
const SchemaVersion = 1

// DefaultLockTimeout is how long Open waits for another process to let go
// of the ledger: short, so a second vgpud fails fast.
const DefaultLockTimeout = time.Second

// Sentinels callers branch on with errors.Is.
var (
	// ErrLocked: another process (a running vgpud) holds the ledger.
	ErrLocked = errors.New("ledger is locked by another process")
	// ErrSchema: the ledger has a schema version this vgpud cannot read.
	ErrSchema = errors.New("unsupported ledger schema")
	// ErrDamaged: the file is not a ledger vgpu can trust (empty, cut
	// short, meta pages not valid, or pages that fail bbolt's consistency
	// check). It is never rewritten.
	ErrDamaged = errors.New("ledger is damaged")
	// ErrNotFound: the record a change needs does not exist.
	ErrNotFound = errors.New("no such record")
)

// Bucket names. Values are JSON, so the file stays inspectable (bbolt's
// CLI) and records can grow fields without a schema bump.
const (
	bucketMeta        = "meta"
	bucketAllocations = "allocations"
	bucketLeases      = "leases"
	bucketDrivers     = "drivers"
	bucketIntents     = "intents"
	bucketCarved      = "carved"
	keySchema         = "schema"
)

func buckets() []string {
	return []string{bucketMeta, bucketAllocations, bucketLeases, bucketDrivers, bucketIntents, bucketCarved}
}

// Ledger is an open ledger file. It is safe for concurrent use: bbolt runs
// one writer at a time and readers beside it.
type Ledger struct {
	db    *bolt.DB
	path  string
	now   func() time.Time
	hooks commitHooks
}

type options struct {
	timeout  time.Duration
	readOnly bool
	now      func() time.Time
}

// Option configures Open.
type Option func(*options)

// WithLockTimeout sets how long Open waits for the file lock (default
// DefaultLockTimeout).
func WithLockTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithReadOnly opens the ledger for reading only, under a shared lock: for
// tools reading it while no vgpud runs. A running vgpud holds the lock
// exclusively, so this then fails with ErrLocked.
func WithReadOnly() Option { return func(o *options) { o.readOnly = true } }

// WithClock sets the clock that stamps records and decides whether a
// lease is live (default time.Now).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// Open opens the ledger at path, creating it (and its directory, 0700)
// when missing.
func Open(path string, opts ...Option) (*Ledger, error) {
	o := options{timeout: DefaultLockTimeout, now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	if !o.readOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("open ledger %s: create its directory: %w", path, err)
		}
	}
	// bbolt makes a new database of an empty file (that would start vgpud
	// with no reservations and hand reserved vGPUs to other domains), and
	// dies of SIGBUS on one cut short: both are refused before it maps them.
	if err := precheck(path, o); err != nil {
		return nil, err
	}
	db, err := openBolt(path, &bolt.Options{Timeout: o.timeout, ReadOnly: o.readOnly})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, lockedError(path, o.timeout)
	}
	if errors.Is(err, ErrDamaged) {
		return nil, fmt.Errorf("open ledger %s: %w%s", path, err, damagedHelp)
	}
	if errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) || errors.Is(err, berrors.ErrVersionMismatch) {
		return nil, fmt.Errorf("open ledger %s: %w: %w%s", path, ErrDamaged, err, damagedHelp)
	}
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	if err := checkPages(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open ledger %s: %w: %w%s", path, ErrDamaged, err, damagedHelp)
	}
	l := &Ledger{db: db, path: path, now: o.now}
	if err := l.init(o.readOnly); err != nil {
		_ = db.Close()
		return nil, err
	}
	return l, nil
}

// init creates the buckets of a new ledger and checks the schema of an
// old one.
func (l *Ledger) init(readOnly bool) error {
	check := func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte(bucketMeta))
		if meta == nil {
			return nil // a new file, or read-only before vgpud ever wrote it
		}
		v := meta.Get([]byte(keySchema))
		if v == nil {
			return nil
		}
		n, err := strconv.Atoi(string(v))
		if err != nil || n != SchemaVersion {
			return fmt.Errorf("open ledger %s: %w: it has schema version %q, this vgpud reads %d (was it written by a newer vgpud?)",
				l.path, ErrSchema, v, SchemaVersion)
		}
		return nil
	}
	if readOnly {
		return l.db.View(check)
	}
	// A ledger already initialised is not written: a write transaction
	// syncs the file, which every vgpuctl command would pay for.
	ready := false
	if err := l.db.View(func(tx *bolt.Tx) error {
		if err := check(tx); err != nil {
			return err
		}
		ready = true
		for _, name := range buckets() { // bucketMeta among them
			ready = ready && tx.Bucket([]byte(name)) != nil
		}
		ready = ready && tx.Bucket([]byte(bucketMeta)).Get([]byte(keySchema)) != nil
		return nil
	}); err != nil || ready {
		return err
	}
	err := l.db.Update(func(tx *bolt.Tx) error {
		if err := check(tx); err != nil {
			return err
		}
		for _, name := range buckets() {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		return tx.Bucket([]byte(bucketMeta)).Put([]byte(keySchema), []byte(strconv.Itoa(SchemaVersion)))
	})
	if err != nil && !errors.Is(err, ErrSchema) {
		return fmt.Errorf("open ledger %s: initialise: %w", l.path, err)
	}
	return err
}

// Path is the ledger's file.
func (l *Ledger) Path() string { return l.path }

// Close releases the file and its lock.
func (l *Ledger) Close() error {
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("close ledger %s: %w", l.path, err)
	}
	return nil
}

// Tx is one transaction. Its methods may only be used inside the function
// given to View or Update.
type Tx struct {
	tx *bolt.Tx
	l  *Ledger
	// commit is what a write transaction wrote, for the OnCommit hooks.
	commit Commit
}

// View runs fn in a read transaction: it sees one consistent state.
func (l *Ledger) View(fn func(*Tx) error) error {
	return l.run(false, fn)
}

// Update runs fn in a write transaction, committed (and fsynced) only if fn
// returns nil; on an error nothing fn wrote is kept. Update calls are
// serialised, so a read-then-write inside fn cannot race another writer.
// fn's own error is returned as is; a failed commit names the ledger.
func (l *Ledger) Update(fn func(*Tx) error) error {
	return l.run(true, fn)
}

func (l *Ledger) run(write bool, fn func(*Tx) error) error {
	var ferr error
	var commit Commit
	body := func(tx *bolt.Tx) error {
		t := &Tx{tx: tx, l: l}
		ferr = fn(t)
		commit = t.commit
		return ferr
	}
	var err error
	if write {
		err = l.db.Update(body)
	} else {
		err = l.db.View(body)
	}
	if ferr != nil {
		return ferr
	}
	if err != nil {
		return fmt.Errorf("commit to ledger %s: %w", l.path, err)
	}
	if write {
		l.hooks.run(commit)
	}
	return nil
}

// The Ledger's one-call methods run a single Tx method in a transaction of
// their own; these return what that method returns.

// viewValue runs fn in a read transaction.
func viewValue[T any](l *Ledger, fn func(*Tx) (T, error)) (T, error) {
	return txValue(l, false, fn)
}

// updateValue runs fn in a write transaction.
func updateValue[T any](l *Ledger, fn func(*Tx) (T, error)) (T, error) {
	return txValue(l, true, fn)
}

func txValue[T any](l *Ledger, write bool, fn func(*Tx) (T, error)) (v T, err error) {
	err = l.run(write, func(tx *Tx) error {
		v, err = fn(tx)
		return err
	})
	return v, err
}

// viewLookup runs fn, a lookup that says whether it found anything, in a
// read transaction.
func viewLookup[T any](l *Ledger, fn func(*Tx) (T, bool, error)) (v T, ok bool, err error) {
	err = l.View(func(tx *Tx) error {
		v, ok, err = fn(tx)
		return err
	})
	return v, ok, err
}

// Now is the ledger's clock.
func (t *Tx) Now() time.Time { return t.l.now() }

// wrap names the action and the ledger in a storage error.
func (t *Tx) wrap(action string, err error) error {
	return fmt.Errorf("%s in ledger %s: %w", action, t.l.path, err)
}

// bucket is nil only in a read-only ledger vgpud never wrote.
func (t *Tx) bucket(name string) *bolt.Bucket { return t.tx.Bucket([]byte(name)) }

func (t *Tx) get(bucket, key string, v any) (bool, error) {
	b := t.bucket(bucket)
	if b == nil {
		return false, nil
	}
	data := b.Get([]byte(key))
	if data == nil {
		return false, nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, t.wrap(fmt.Sprintf("decode %s record %q", bucket, key), err)
	}
	return true, nil
}

func (t *Tx) put(bucket, key string, v any) error {
	t.commit.wrote(bucket, key)
	data, err := json.Marshal(v)
	if err == nil {
		err = t.bucket(bucket).Put([]byte(key), data)
	}
	if err != nil {
		return t.wrap(fmt.Sprintf("write %s record %q", bucket, key), err)
	}
	return nil
}

func (t *Tx) delete(bucket, key string) error {
	t.commit.wrote(bucket, key)
	if err := t.bucket(bucket).Delete([]byte(key)); err != nil {
		return t.wrap(fmt.Sprintf("delete %s record %q", bucket, key), err)
	}
	return nil
}

// records decodes the records of bucket that keep accepts (all where keep
// is nil), in key order.
func records[T any](t *Tx, bucket string, keep func(T) bool) ([]T, error) {
	b := t.bucket(bucket)
	if b == nil {
		return nil, nil
	}
	var out []T
	err := b.ForEach(func(k, data []byte) error {
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			return t.wrap(fmt.Sprintf("decode %s record %q", bucket, k), err)
		}
		if keep == nil || keep(v) {
			out = append(out, v)
		}
		return nil
	})
	return out, err
}

// damagedHelp says what to do with a ledger vgpu will not trust.
const damagedHelp = "; vgpud will not start on it and leaves it as it is. Restore the ledger from a backup," +
	" or run `vgpuctl recover-ledger`: it rebuilds the ledger from the host and libvirt's domains and keeps this file beside it"

// openBolt is bolt.Open with a panic on a damaged file turned into an error.
func openBolt(path string, o *bolt.Options) (db *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("%w: %v", ErrDamaged, r)
		}
	}()
	return bolt.Open(path, 0o600, o)
}

// checkPages runs bbolt's consistency check over every page: damaged pages
// make bbolt panic on first use, so they are found before any.
func checkPages(db *bolt.DB) error {
	return db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}
