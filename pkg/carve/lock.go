package carve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Locker serialises changes to one GPU across processes with flock(2) on a
// file per GPU, so two vgpuctl runs (or vgpuctl and vgpud) never interleave.
// The kernel drops the lock if the holder dies.
type Locker struct{ dir string }

// NewLocker keeps lock files in dir (created 0700 if missing).
func NewLocker(dir string) *Locker { return &Locker{dir: dir} }

// Lock waits until t (a GPU, or a virtual mdev parent) is free or ctx
// ends; call the returned func to release it.
func (l *Locker) Lock(ctx context.Context, t vgpu.Target) (func(), error) {
	return l.lock(ctx, false, lockFile(t), t.Describe())
}

// TryLock is Lock of a GPU without the wait: ok is false while another
// holds it.
func (l *Locker) TryLock(gpu pci.Address) (unlock func(), ok bool, err error) {
	t := vgpu.GPU(gpu)
	unlock, err = l.lock(context.Background(), true, lockFile(t), t.Describe())
	if errors.Is(err, errBusy) {
		return nil, false, nil
	}
	return unlock, err == nil, err
}

// lockFile names t's lock file, a GPU's apart from any parent's.
func lockFile(t vgpu.Target) string {
	if t.IsParent() {
		return "mdev-parent-" + strings.ReplaceAll(t.Parent, "/", "_")
	}
	return strings.ReplaceAll(t.GPU.String(), ":", "_")
}

// errBusy: a lock tried once found the GPU held.
var errBusy = errors.New("held by another change")

// lock waits for the lock until ctx ends; with try, it tries once
// (errBusy).
func (l *Locker) lock(ctx context.Context, try bool, file, gpu string) (func(), error) {
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create lock directory %s: %w", l.dir, err)
	}
	name := filepath.Join(l.dir, file+".lock")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", name, err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s for %s: %w", name, gpu, err)
		}
		if try {
			_ = f.Close()
			return nil, errBusy
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("wait for the lock on %s (%s): %w", gpu, name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
