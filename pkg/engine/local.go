package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Local is vgpud's engine in process, for a command line on a host where
// no vgpud answers: the ledger in StateDir is opened directly (as at boot,
// before vgpud starts) and the lock directory is shared with vgpud.
type Local struct {
	StateDir   string
	Socket     string // where vgpud was looked for, for the errors
	FS         sysfs.FS
	MIG        nvstate.Manager
	MdevctlDir string
	Warn       io.Writer // warnings that do not stop the command
}

// OpenLedger opens the ledger for the command's own use. A running vgpud
// holds it: the error says so.
func (l Local) OpenLedger(opts ...ledger.Option) (*ledger.Ledger, error) {
	led, err := ledger.Open(filepath.Join(l.StateDir, LedgerFile), opts...)
	if errors.Is(err, ledger.ErrLocked) {
		return nil, fmt.Errorf("%w; vgpud does not answer on %s: is it starting, or hung?", err, l.Socket)
	}
	return led, err
}

// ReadLedger opens the ledger read-only for a look, or returns nil when
// there is none or vgpud holds it.
func (l Local) ReadLedger() *ledger.Ledger {
	p := filepath.Join(l.StateDir, LedgerFile)
	if _, err := os.Stat(p); err != nil {
		return nil
	}
	led, err := ledger.Open(p, ledger.WithReadOnly())
	if err != nil {
		fmt.Fprintf(l.Warn, "vgpuctl: warning: %v; not checking allocations\n", err)
		return nil
	}
	return led
}

// Carver is the carver of a host without vgpud: the ledger remembers
// original drivers and the VF driver autoprobe a carve turns, and protects
// what it allocates, as in vgpud. close releases the ledger.
func (l Local) Carver(cat *profile.Catalog) (c *carve.Carver, close func(), err error) {
	led, err := l.OpenLedger()
	if err != nil {
		return nil, nil, err
	}
	c = carve.New(l.FS, cat, led, carve.WithUsage(led), carve.WithAutoprobeJournal(led),
		carve.WithLocker(carve.NewLocker(filepath.Join(l.StateDir, LocksDir))), carve.WithMIG(l.MIG))
	return c, func() { _ = led.Close() }, nil
}

// Engine opens the ledger and runs an engine on it; close releases the
// ledger.
func (l Local) Engine(cat *profile.Catalog, cfg *config.Config) (e *Engine, close func(), err error) {
	led, err := l.OpenLedger()
	if err != nil {
		return nil, nil, err
	}
	e, err = NewEngine(EngineOptions{FS: l.FS, Ledger: led, Catalog: cat, Config: cfg,
		LockDir: filepath.Join(l.StateDir, LocksDir), MdevctlDir: l.MdevctlDir})
	if err != nil {
		_ = led.Close()
		return nil, nil, err
	}
	return e, func() { _ = led.Close() }, nil
}

// configError is a config this host cannot take, with its assert's words.
type configError struct{ msg string }

func (e configError) Error() string        { return e.msg }
func (e configError) Is(target error) bool { return target == ErrConfig }

// Apply validates cfg (read from data) against the host, makes it the
// host config at cfgPath (unless cfg was read from there) and reconciles,
// as vgpud would at start; dryRun only says what a reconcile would do. A
// config the host cannot take is ErrConfig.
func (l Local) Apply(ctx context.Context, cat *profile.Catalog, data []byte, cfg *config.Config, cfgPath string, dryRun bool) (api.ReconcileReport, error) {
	if dryRun {
		led := l.ReadLedger()
		if led != nil {
			defer led.Close()
		}
		a := Assert(ctx, AssertInput{FS: l.FS, Catalog: cat, Config: cfg, Ledger: led, MIG: l.MIG, MdevctlDir: l.MdevctlDir})
		if a.Error != "" {
			return api.ReconcileReport{}, configError{a.Error}
		}
		return PlanReport(a, ReasonApply), nil
	}
	e, done, err := l.Engine(cat, cfg)
	if err != nil {
		return api.ReconcileReport{}, err
	}
	defer done()
	// Check it fits the host before writing it anywhere.
	if a := e.Assert(ctx, cfg); a.Error != "" {
		return api.ReconcileReport{}, configError{a.Error}
	}
	if same, _ := sameFile(cfg.Path, cfgPath); !same && cfgPath != "" {
		if err := WriteConfig(cfgPath, data); err != nil {
			return api.ReconcileReport{}, err
		}
	}
	return e.Start(ctx), nil
}

func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

// VGPUs lists the host's vGPUs as the kernel shows them, of GPUs and of
// virtual mdev parents, and a warning when some vGPU's use is unknown.
// The catalog is loaded once the GPUs are found.
func (l Local) VGPUs(ctx context.Context, catalog func() (*profile.Catalog, error)) ([]vgpu.VGPU, string, error) {
	gpus, err := inventory.Discover(l.FS, nil)
	if err != nil {
		return nil, "", err
	}
	cat, err := catalog()
	if err != nil {
		return nil, "", err
	}
	for i := range gpus {
		// Only a GPU with VFs can have per-VF vGPUs, whose types NVML's
		// ids may be needed to recognise.
		if gpus[i].SRIOV != nil && gpus[i].SRIOV.NumVFs > 0 {
			carve.EnrichWith(l.MIG, cat, &gpus[i])
		}
	}
	usage := carve.VFIOUsage{FS: l.FS}.Snapshot() // one /proc scan for both lists, if any
	vs, err := carve.VGPUs(ctx, l.FS, gpus, cat, usage)
	if err != nil {
		return nil, "", err
	}
	relabel(vs, gpus, cat, l.MIG)
	// Virtual mdev parents (mbochs, mtty) are carved by name; their mdevs
	// are vGPUs too.
	pv, err := carve.ParentVGPUs(ctx, l.FS, cat, nil, usage)
	if err != nil {
		return nil, "", err
	}
	return append(vs, pv...), usage.Warning(), nil
}

// relabel names the vGPUs of each GPU by the profile NVML tells apart from
// others of its shape (carve.ProfileOfSched). carve.VGPUs named them by
// carve.ProfileOf, which carries a profile exactly when this does.
func relabel(vs []vgpu.VGPU, gpus []inventory.GPU, cat *profile.Catalog, m nvstate.Manager) {
	for _, x := range gpus {
		p := carve.ProfileOfSched(x, cat, m)
		if p == "" {
			continue
		}
		for i := range vs {
			if vs[i].GPU == x.Address.String() {
				vs[i].Profile = p
			}
		}
	}
}

// Release frees what the ledger holds for the domain named or identified
// by who (see DomainOf).
func (l Local) Release(ctx context.Context, cat *profile.Catalog, who string, force bool) (api.Holdings, error) {
	e, done, err := l.Engine(cat, nil)
	if err != nil {
		return api.Holdings{}, err
	}
	defer done()
	all, err := e.Holdings(ctx, "")
	if err != nil {
		return api.Holdings{}, err
	}
	u, err := DomainOf(who, all)
	if err != nil || u == "" {
		return NoHoldings(), err
	}
	return e.Free(ctx, u, force)
}

// ErrAmbiguous: a domain name several domains holding vGPUs have.
var ErrAmbiguous = errors.New("ambiguous domain name")

// ambiguousError is ErrAmbiguous with its own message.
type ambiguousError string

func (e ambiguousError) Error() string        { return string(e) }
func (e ambiguousError) Is(target error) bool { return target == ErrAmbiguous }

// NoHoldings is what a release frees when the ledger holds nothing.
func NoHoldings() api.Holdings {
	return api.Holdings{Allocations: []api.Allocation{}, Leases: []api.Lease{}}
}

// DomainOf finds the domain UUID for a name or UUID among what the ledger
// holds. Nothing to free is not an error, whether named by UUID (passed
// on) or by a name no holding has (""): a release after vgpud collected
// the domain, or a retried one, succeeds. A name must not match several
// domains (ErrAmbiguous).
func DomainOf(who string, h api.Holdings) (string, error) {
	if u, err := uuid.Parse(who); err == nil && len(who) == 36 {
		return u.String(), nil
	}
	var uuids []string
	add := func(name, u string) {
		if name == who && !slices.Contains(uuids, u) {
			uuids = append(uuids, u)
		}
	}
	for _, a := range h.Allocations {
		add(a.DomainName, a.DomainUUID)
	}
	for _, l := range h.Leases {
		add(l.DomainName, l.DomainUUID)
	}
	switch len(uuids) {
	case 0:
		return "", nil
	case 1:
		return uuids[0], nil
	}
	slices.Sort(uuids)
	return "", ambiguousError("several domains named " + who + " hold vGPUs: " + strings.Join(uuids, ", ") + "; name one by UUID")
}
