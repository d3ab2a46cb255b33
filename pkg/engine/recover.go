package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vgpu-project/vgpu/internal/durable"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// RecoverOptions are what a ledger recovery rebuilds from.
type RecoverOptions struct {
	StateDir   string        // the ledger and the lock directory
	ConfigPath string        // the host config vgpud runs with; missing: the default
	Domains    []KnownDomain // every domain libvirt knows
	FS         sysfs.FS
	// Catalog loads the profile catalog, once the old ledger is known to
	// need the rebuild.
	Catalog       func() (*profile.Catalog, error)
	DryRun, Force bool
}

// RecoverResult is what a ledger recovery did.
type RecoverResult struct {
	Ledger string `json:"ledger"`
	// Kept is where the old ledger file stays ("" when there was none).
	Kept   string `json:"kept,omitempty"`
	DryRun bool   `json:"dryRun,omitempty"`
	RebuildReport
}

// ErrLedgerSound refuses to recover a ledger that opens and checks fine
// (unless forced).
var ErrLedgerSound = errors.New("the ledger opens and checks fine")

// soundError is ErrLedgerSound with its own message.
type soundError struct{ path string }

func (e soundError) Error() string {
	return fmt.Sprintf("the ledger %s opens and checks fine: nothing to recover (--force rebuilds it anyway, keeping this one)", e.path)
}
func (e soundError) Is(target error) bool { return target == ErrLedgerSound }

// RecoverLedger rebuilds the ledger in o.StateDir from the host and
// libvirt's domains, while no vgpud runs. The damaged file is never
// mapped or changed: it stays beside the new one as ledger.db.damaged-TIME.
func RecoverLedger(ctx context.Context, o RecoverOptions) (RecoverResult, error) {
	path := filepath.Join(o.StateDir, LedgerFile)
	res := RecoverResult{Ledger: path, DryRun: o.DryRun}
	_, statErr := os.Stat(path)
	exists := statErr == nil
	if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
		return res, fmt.Errorf("recover the ledger %s: %w", path, statErr)
	}
	if exists {
		old, err := ledger.Open(path, ledger.WithReadOnly())
		switch {
		case err == nil:
			_ = old.Close()
			if !o.Force {
				return res, soundError{path}
			}
		case errors.Is(err, ledger.ErrLocked):
			return res, fmt.Errorf("recover the ledger %s: %w: a vgpud holds it; stop it first", path, err)
		case !errors.Is(err, ledger.ErrDamaged):
			return res, fmt.Errorf("recover the ledger %s: %w", path, err)
		}
	}
	if exists {
		// Hold the old file's lock (bbolt's flock) until the new one is in
		// place: a vgpud starting meanwhile fails as "locked" instead of
		// running on a file about to be replaced.
		f, err := os.Open(path)
		if err != nil {
			return res, fmt.Errorf("recover the ledger %s: %w", path, err)
		}
		defer f.Close()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			return res, fmt.Errorf("recover the ledger %s: lock it: %w (is a vgpud starting?)", path, err)
		}
	}
	cfg, err := config.Load(o.ConfigPath)
	if errors.Is(err, fs.ErrNotExist) {
		cfg, err = config.Default(), nil
	}
	if err != nil {
		return res, err
	}
	cat, err := o.Catalog()
	if err != nil {
		return res, err
	}

	// Built aside, then put in place with one rename: a crash leaves
	// either the damaged file (vgpud refuses it) or the whole new one.
	tmp := path + ".rebuild"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("recover the ledger %s: remove the leftover %s: %w", path, tmp, err)
	}
	rep, err := rebuildInto(ctx, o, tmp, cfg, cat)
	res.RebuildReport = rep
	if err != nil || o.DryRun {
		_ = os.Remove(tmp)
		return res, err
	}
	if exists {
		res.Kept = path + ".damaged-" + time.Now().UTC().Format("20060102T150405Z")
		if err := os.Link(path, res.Kept); err != nil {
			_ = os.Remove(tmp)
			return res, fmt.Errorf("recover the ledger %s: keep the old file as %s: %w", path, res.Kept, err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return res, fmt.Errorf("recover the ledger %s: put the rebuilt ledger in place: %w", path, err)
	}
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		return res, fmt.Errorf("recover the ledger %s: %w", path, err)
	}
	return res, nil
}

// rebuildInto rebuilds the ledger into the new file path.
func rebuildInto(ctx context.Context, o RecoverOptions, path string, cfg *config.Config, cat *profile.Catalog) (RebuildReport, error) {
	l, err := ledger.Open(path)
	if err != nil {
		return RebuildReport{}, err
	}
	e, err := NewEngine(EngineOptions{FS: o.FS, Ledger: l, Catalog: cat, Config: cfg,
		LockDir: filepath.Join(o.StateDir, LocksDir)})
	if err != nil {
		_ = l.Close()
		return RebuildReport{}, err
	}
	rep, err := e.Rebuild(ctx, o.Domains)
	if cerr := l.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close the rebuilt ledger %s: %w", path, cerr)
	}
	return rep, err
}
