package carve

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvvf"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Sentinel errors callers branch on (vgpuctl maps them to exit codes).
var (
	// ErrInUse: the change would destroy a vGPU in use and force was not given.
	ErrInUse = errors.New("vGPU in use")
	// ErrUndo: a step failed and so did undoing the steps before it.
	ErrUndo = errors.New("undo failed; the GPU is partly changed")
	// ErrGroupShared: a passthrough would take a device the host uses,
	// for it shares the GPU's IOMMU group.
	ErrGroupShared = errors.New("the GPU's IOMMU group holds a device of the host")
	// ErrHostConsole: a passthrough would take the GPU the host's console
	// runs on (boot_vga).
	ErrHostConsole = errors.New("the GPU drives the host's console")
	// ErrVendorTool: a vendor tool (sriov-manage) failed or left the GPU
	// other than it should.
	ErrVendorTool = errors.New("vendor tool failed")
	// ErrPinnedElsewhere: an mdev UUID pinned for the carve's pool exists
	// on another parent; vgpu moves no mdev between parents.
	ErrPinnedElsewhere = errors.New("pinned mdev UUID exists on another parent")
)

// DriverStore remembers the driver a device had before vgpu moved it to
// vfio-pci, so an uncarve can give it back.
type DriverStore interface {
	// RememberDriver records driver for addr unless one is recorded already.
	RememberDriver(addr pci.Address, driver string) error
	OriginalDriver(addr pci.Address) (string, bool, error)
	ForgetDriver(addr pci.Address) error
}

// UsageChecker says whether a vGPU (a device address or an mdev UUID) is in
// use, and by whom.
type UsageChecker interface {
	Holder(ctx context.Context, vgpu string) (holder string, inUse bool, err error)
}

// Carver plans and applies carves on one host.
type Carver struct {
	fs      sysfs.FS
	catalog *profile.Catalog
	drivers DriverStore
	usage   []UsageChecker
	locks   *Locker
	journal AutoprobeJournal // nil: turns of autoprobe are not recorded
	log     *slog.Logger
	mig     nvstate.Manager // nil: MIG-backed profiles are refused
	// toolTries and toolWait: sriov-manage is retried while the driver
	// refuses its unbind lock, waiting toolWait times the attempt.
	toolTries int
	toolWait  time.Duration

	// typesMu guards types and sizes: each NVIDIA GPU's vGPU types and
	// memory as NVML states them (Enrich).
	typesMu sync.Mutex
	types   map[pci.Address]nvAnswer[[]inventory.VGPUType]
	sizes   map[pci.Address]nvAnswer[nvstate.Sizes]
}

// Option configures a Carver.
type Option func(*Carver)

// WithUsage adds a checker consulted before destroying a vGPU (the ledger).
func WithUsage(u UsageChecker) Option { return func(c *Carver) { c.usage = append(c.usage, u) } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *Carver) { c.log = l } }

// WithToolRetry sets how often sriov-manage is tried while an NVML client
// holds the GPU's unbind lock, and the wait unit between tries (default 5
// tries, 1s: waits of 1, 2, 3 and 4 s).
func WithToolRetry(tries int, wait time.Duration) Option {
	return func(c *Carver) { c.toolTries, c.toolWait = max(tries, 1), wait }
}

// WithLocker serialises carves of one GPU across processes.
func WithLocker(l *Locker) Option { return func(c *Carver) { c.locks = l } }

// New returns a Carver. The VFIO group check is always on.
func New(f sysfs.FS, catalog *profile.Catalog, drivers DriverStore, opts ...Option) *Carver {
	c := &Carver{fs: f, catalog: catalog, drivers: drivers, log: slog.New(slog.DiscardHandler), toolTries: 5, toolWait: time.Second,
		types: map[pci.Address]nvAnswer[[]inventory.VGPUType]{}, sizes: map[pci.Address]nvAnswer[nvstate.Sizes]{}}
	c.usage = []UsageChecker{VFIOUsage{FS: f}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Options of one carve or uncarve.
type Options struct {
	// Force destroys vGPUs in use. The kernel then waits for their VFIO
	// users to let go before it removes them.
	Force bool
	// DryRun plans without changing anything.
	DryRun bool
	// GIMSiblings: the caller gives every old-GIM GPU the same profile (a
	// validated host config), so a gim reload may take the other GIM
	// GPUs' VFs off vfio-pci (unless in use); their own carves rebind
	// them. Without it such a reload is refused (ErrGIMShared).
	GIMSiblings bool
	// MdevUUIDs are the UUIDs of the first mdevs of a carve's pool, in
	// order (the host config's mdev-uuids): the carve keeps or makes those
	// mdevs, and refuses one that exists outside the GPU or parent
	// (ErrPinnedElsewhere). Only with a profile that makes mdevs.
	MdevUUIDs []string
	// OnForced, when set, hears the vGPUs in use a forced change is about
	// to destroy, before the first write: each removal then waits in the
	// kernel until the vGPU's user lets go.
	OnForced func(blocked []vgpu.Blocker) `json:"-"`
}

// Result is what a carve or uncarve did.
type Result struct {
	Plan    Plan `json:"plan"`
	Applied int  `json:"applied"` // ops carried out
}

// carveGPU makes GPU addr carry profile name.
func (c *Carver) carveGPU(ctx context.Context, addr pci.Address, name string, opt Options) (Result, error) {
	return c.change(ctx, addr, opt, func(g inventory.GPU, original string) (Plan, error) {
		p, err := c.catalog.Resolve(name, g)
		if errors.Is(err, profile.ErrCannotSplit) && c.mig != nil && askGuest(g) {
			// A refusal says why as gpus --why does: where sysfs cannot
			// tell a guest (a hypervisor whose host bridge is not QEMU's),
			// NVML's virtualization mode can, and firmware advice would
			// mislead. Asked on this path only, never for a plan.
			GuestWith(c.mig, &g)
			p, err = c.catalog.Resolve(name, g)
		}
		if err != nil {
			return Plan{}, err
		}
		if p.MdevUUIDs, err = c.checkPins(p, opt.MdevUUIDs, gpuMdevs(g)); err != nil {
			return Plan{}, err
		}
		if p.Dialect == inventory.DialectPassthrough {
			if g.Driver != vfioPCI { // change read them otherwise
				if err := c.readPeers(&g); err != nil {
					return Plan{}, err
				}
			}
			// What it takes from the host it takes only when forced,
			// a dry run included.
			if why := HostUse(g); why != "" && !opt.Force {
				return Plan{}, &HostUseError{GPU: g.Address, Profile: name, Console: g.BootVGA, Shared: len(hostPeers(g)) > 0, Why: why}
			}
		}
		var pl Plan
		if p.GPUInstance != nil {
			st, err := c.migState(g.Address)
			switch {
			case err == nil:
				pl, err = PlanCarveMIG(g, p, original, st)
				if err != nil {
					return pl, err
				}
			case opt.DryRun && errors.Is(err, nvstate.ErrUnavailable):
				// A look without NVML (assert in the static vgpuctl) sees a
				// GPU that carries the profile by its VFs' types, as Carries
				// does; what a change would do it cannot plan.
				sl, perr := PlanCarve(g, p, original)
				if perr != nil || !sl.Empty() {
					return Plan{}, fmt.Errorf("carve %s on %s: %w", name, g.Address, err)
				}
				pl = sl
			default:
				return Plan{}, fmt.Errorf("carve %s on %s: %w", name, g.Address, err)
			}
		} else if pl, err = PlanCarve(g, p, original); err != nil {
			return pl, err
		} else if pl, err = c.withMIGOff(g, p, original, pl); err != nil {
			return pl, err
		}
		if p.Scheduler != nil {
			if pl, err = c.withScheduler(g, p, original, pl); err != nil {
				return pl, err
			}
		}
		if p.MixedSize {
			if pl, err = c.withMixedSize(g, p, original, pl); err != nil {
				return pl, err
			}
		}
		pl = c.keepMixedSize(g, pl)
		if i := slices.IndexFunc(pl.Ops, func(o Op) bool { return o.Kind == OpGIMReload }); i >= 0 {
			siblings, err := c.gimSiblings(g.Address, pl.Ops[i].Count, opt.GIMSiblings)
			if err != nil {
				return pl, err
			}
			pl.Ops = slices.Insert(pl.Ops, i, siblings...)
		}
		return pl, nil
	})
}

// HostUseError refuses a passthrough that would take from the host its
// console or a device of the GPU's IOMMU group, unless forced.
type HostUseError struct {
	GPU     pci.Address
	Profile string
	Console bool // the GPU drives the host's console
	Shared  bool // the IOMMU group holds the host's devices
	Why     string
}

func (e *HostUseError) Error() string {
	return fmt.Sprintf("refusing to pass %s through (profile %s): %s; --force passes it through regardless, and the uncarve gives each function its driver back",
		e.GPU, e.Profile, e.Why)
}

// Is makes errors.Is(err, ErrHostConsole) and errors.Is(err,
// ErrGroupShared) true as they apply.
func (e *HostUseError) Is(target error) bool {
	return target == ErrHostConsole && e.Console || target == ErrGroupShared && e.Shared
}

// uncarveGPU removes every vGPU of GPU addr and restores its original driver.
func (c *Carver) uncarveGPU(ctx context.Context, addr pci.Address, opt Options) (Result, error) {
	return c.change(ctx, addr, opt, func(g inventory.GPU, original string) (Plan, error) {
		pl, err := c.uncarveMIG(g, PlanUncarve(g, original))
		if err != nil {
			return pl, err
		}
		return c.keepMixedSize(g, pl), nil
	})
}

func (c *Carver) change(ctx context.Context, addr pci.Address, opt Options, plan func(inventory.GPU, string) (Plan, error)) (Result, error) {
	if c.locks != nil && !opt.DryRun {
		unlock, err := c.locks.Lock(ctx, vgpu.GPU(addr))
		if err != nil {
			return Result{}, err
		}
		defer unlock()
	}
	if !opt.DryRun {
		// A change of this GPU cut short may have left its VF driver
		// autoprobe turned: put back first, it is what this change reads
		// as the setting to keep.
		if _, err := c.repairAutoprobeOf(addr); err != nil {
			return Result{}, err
		}
	}
	// Plan under the lock, from what the kernel shows now.
	g, err := inventory.Get(c.fs, nil, addr)
	if err != nil {
		return Result{}, err
	}
	c.Enrich(&g)
	original, _, err := c.drivers.OriginalDriver(addr)
	if err != nil {
		return Result{}, fmt.Errorf("look up the original driver of %s: %w", addr, err)
	}
	// A GPU on vfio-pci was passed through: its card's functions go back
	// with it. Other GPUs' groups matter only to a passthrough carve.
	if g.Driver == vfioPCI {
		if err := c.readPeers(&g); err != nil {
			return Result{}, err
		}
	}
	pl, err := plan(g, original)
	if err != nil {
		return Result{}, err
	}
	res, err := c.execute(ctx, pl, opt)
	if err != nil || res.Applied == 0 {
		return res, err
	}
	if pl.Profile == "" {
		// The GPU (and the functions of its group it took) are back on
		// their own drivers: nothing left to remember.
		forget := []pci.Address{addr}
		for _, p := range g.Peers {
			if p.Original != "" {
				forget = append(forget, p.Address)
			}
		}
		for _, a := range forget {
			if err := c.drivers.ForgetDriver(a); err != nil {
				return res, fmt.Errorf("forget the original driver of %s: %w", a, err)
			}
		}
	}
	return res, nil
}

// readPeers fills g.Peers, each with the driver the store remembers for it.
func (c *Carver) readPeers(g *inventory.GPU) error {
	peers, err := inventory.GroupPeers(c.fs, *g)
	if err != nil {
		return err
	}
	for i, p := range peers {
		if peers[i].Original, _, err = c.drivers.OriginalDriver(p.Address); err != nil {
			return fmt.Errorf("look up the original driver of %s: %w", p.Address, err)
		}
	}
	g.Peers = peers
	return nil
}

// execute checks what a plan would destroy and, unless it is a dry run,
// refused or empty, applies it. The caller holds the lock.
func (c *Carver) execute(ctx context.Context, pl Plan, opt Options) (Result, error) {
	var err error
	if pl.Blocked, err = c.blockers(ctx, pl); err != nil {
		return Result{Plan: pl}, err
	}
	res := Result{Plan: pl}
	if opt.DryRun || pl.Empty() {
		return res, nil
	}
	if len(pl.Blocked) > 0 && !opt.Force {
		return res, &InUseError{GPU: pl.GPU, Parent: pl.Parent, Blocked: pl.Blocked}
	}
	if len(pl.Blocked) > 0 && opt.OnForced != nil {
		opt.OnForced(pl.Blocked)
	}
	res.Applied, err = c.apply(ctx, pl)
	return res, err
}

// InUseError lists the vGPUs in use, or of unknown use, that a change
// would destroy.
type InUseError struct {
	GPU     pci.Address
	Parent  string // set instead of GPU for a virtual mdev parent
	Blocked []vgpu.Blocker
}

func (e *InUseError) Error() string {
	var used, unknown []string
	why := ""
	for _, b := range e.Blocked {
		if b.Unknown {
			unknown = append(unknown, b.VGPU)
			why = b.Holder // one scan's warning: the same for all
			continue
		}
		used = append(used, fmt.Sprintf("%s (%s)", b.VGPU, b.Holder))
	}
	what := e.GPU.String()
	if e.Parent != "" {
		what = e.Parent
	}
	var parts []string
	if len(used) > 0 {
		parts = append(parts, "vGPUs in use: "+strings.Join(used, ", "))
	}
	if len(unknown) > 0 {
		parts = append(parts, fmt.Sprintf("vGPUs whose use cannot be told: %s (%s)", strings.Join(unknown, ", "), why))
	}
	return fmt.Sprintf("refusing to change %s: it would destroy %s; stop their VMs first or use --force",
		what, strings.Join(parts, ", and "))
}

// Unwrap makes errors.Is(err, ErrInUse) true.
func (e *InUseError) Unwrap() error { return ErrInUse }

// blockers checks every vGPU the plan destroys.
func (c *Carver) blockers(ctx context.Context, pl Plan) ([]vgpu.Blocker, error) {
	var out []vgpu.Blocker
	seen := map[string]bool{}
	var usage []UsageChecker // taken at the first target: one /proc scan for them all
	for _, o := range pl.Ops {
		if o.Destroys == "" {
			continue
		}
		targets := []string{o.Destroys}
		switch o.Kind {
		case OpNumVFs, OpSriovManage, OpAMDSMINumVF:
			// Disabling VFs destroys each VF and whatever sits on it.
			vfs, err := c.vfsAndChildren(o.Device)
			if err != nil {
				return nil, err
			}
			targets = vfs
		case OpGIMReload:
			// A reload re-creates every GIM GPU's VFs.
			pfs, err := c.gimPFs()
			if err != nil {
				return nil, err
			}
			targets = nil
			for _, pf := range pfs {
				vfs, err := c.vfsAndChildren(pf)
				if err != nil {
					return nil, err
				}
				targets = append(targets, vfs...)
			}
		}
		for _, t := range targets {
			if seen[t] {
				continue
			}
			seen[t] = true
			if usage == nil {
				usage = snapshots(c.usage)
			}
			v := vgpu.VGPU{ID: t}
			if err := fillUse(ctx, &v, usage); err != nil {
				return nil, fmt.Errorf("check whether %s is in use: %w", t, err)
			}
			switch {
			case v.InUse:
				out = append(out, vgpu.Blocker{VGPU: t, Holder: v.Holder})
			case v.UseUnknown:
				// Fail closed: what cannot be seen may be a running VM.
				out = append(out, vgpu.Blocker{VGPU: t, Holder: "use unknown: " + useUnknownWhy(usage), Unknown: true})
			}
		}
	}
	return out, nil
}

func (c *Carver) vfsAndChildren(pf pci.Address) ([]string, error) {
	vfs, err := sriov.VFs(c.fs, pf)
	if err != nil {
		return nil, err
	}
	insts, err := mdev.Instances(c.fs)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, vf := range vfs {
		out = append(out, vf.Address.String())
		for _, in := range insts {
			if in.Parent == vf.Address.String() {
				out = append(out, in.UUID)
			}
		}
	}
	return out, nil
}

// apply runs a plan's ops (Run); the caller holds the GPU's lock.
func (c *Carver) apply(ctx context.Context, pl Plan) (int, error) {
	return c.Run(ctx, pl.Target(), pl.Ops)
}

// Run carries out ops on t in order and returns how many it carried out;
// it is how any other package writes to the kernel (none calls the
// kernel-op writers: TestOnlyCarveWritesTheKernel). Before each op it
// reads the live state the op changes into that op's undo; when one
// fails, its own undo and those of the ops before it run in reverse,
// leaving t as it was. Run takes no lock: the caller serialises changes
// of t (a Locker, the engine's host lock) and records any intent that a
// crash between two ops needs repaired.
func (c *Carver) Run(ctx context.Context, t vgpu.Target, ops []Op) (int, error) {
	var undos []Op
	for i, o := range ops {
		undo, err := c.inverse(o)
		if err == nil {
			c.log.Info("carve step", "gpu", t.String(), "step", i+1, "op", o.String())
			err = c.exec(ctx, o)
			// A failed op may have half-happened: its undo reads live state
			// and only reverts what changed.
			undos = append(undos, undo...)
		}
		if err != nil {
			err = fmt.Errorf("step %d of %d (%s) on %s: %w", i+1, len(ops), o, t, err)
			if uerr := c.undo(context.WithoutCancel(ctx), undos); uerr != nil {
				return i, fmt.Errorf("%w; %w: %w (run the same command again, or reconcile, to repair)", err, ErrUndo, uerr)
			}
			return i, fmt.Errorf("%w; undone, the GPU is as it was", err)
		}
	}
	return len(ops), nil
}

func (c *Carver) undo(ctx context.Context, undos []Op) error {
	var errs []error
	for i := len(undos) - 1; i >= 0; i-- {
		c.log.Info("undo step", "op", undos[i].String())
		if err := c.exec(ctx, undos[i]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", undos[i], err))
		}
	}
	return errors.Join(errs...)
}

// useUnknownWhy is the warning of the /proc scan that could not read
// every process.
func useUnknownWhy(usage []UsageChecker) string {
	for _, u := range usage {
		if v, ok := u.(VFIOUsage); ok {
			if w := v.Warning(); w != "" {
				return w
			}
		}
	}
	return "a usage check could not tell"
}

// resolve names the device of an op, following VF indexes.
func (c *Carver) resolve(o Op) (pci.Address, error) {
	if o.VF == nil {
		return o.Device, nil
	}
	vfs, err := sriov.VFs(c.fs, o.Device)
	if err != nil {
		return pci.Address{}, err
	}
	for _, vf := range vfs {
		if vf.Index == *o.VF {
			return vf.Address, nil
		}
	}
	return pci.Address{}, fmt.Errorf("%s has no VF %d", o.Device, *o.VF)
}

// inverse reads the live state an op is about to change and returns the
// ops that put it back. Ops on devices that do not exist yet need none:
// undoing their creation removes them.
func (c *Carver) inverse(o Op) ([]Op, error) {
	switch o.Kind {
	case OpDriver:
		dev, err := c.resolve(o)
		if err != nil {
			return nil, nil
		}
		drv, err := pci.CurrentDriver(c.fs, dev)
		if err != nil {
			return nil, err
		}
		ov, err := pci.DriverOverride(c.fs, dev)
		if err != nil {
			return nil, err
		}
		return []Op{{Kind: OpDriver, Device: dev, To: drv, Override: &ov}}, nil
	case OpNumVFs:
		n, err := sriov.NumVFs(c.fs, o.Device)
		if err != nil {
			return nil, err
		}
		// Re-creating VFs leaves them on their autoprobe driver; the undo of
		// the ops that moved them (recorded earlier) rebinds them after this.
		undo := []Op{{Kind: OpNumVFs, Device: o.Device, Count: n}}
		// xe resets the scheduling of the VFs it disables and releases
		// their VRAM: VFs put back get their VRAM before and their
		// scheduling after (undone last to first).
		vram, xeUndo, err := c.xeKept(o.Device, n)
		if err != nil {
			return nil, err
		}
		undo = append(append(xeUndo, undo...), vram...)
		if o.Autoprobe != nil {
			was, err := sriov.Autoprobe(c.fs, o.Device)
			if err != nil {
				return nil, err
			}
			// Undone last to first: the VF count, then the setting.
			undo = append([]Op{{Kind: OpAutoprobe, Device: o.Device, Autoprobe: &was}}, undo...)
		}
		return undo, nil
	case OpSriovManage:
		n, err := sriov.NumVFs(c.fs, o.Device)
		if err != nil {
			return nil, err
		}
		// Undone last to first: the VFs, their drivers (-d unbinds them
		// before it may fail), then the PF's driver, which a script
		// stopped half-way leaves on pci-pf-stub or on none. Re-enabled
		// VFs come back on nvidia without types; the undo of the ops that
		// changed them (recorded earlier) runs after these.
		undo, err := c.inverse(Op{Kind: OpDriver, Device: o.Device})
		if err != nil {
			return nil, err
		}
		vfs, err := sriov.VFs(c.fs, o.Device)
		if err != nil {
			return nil, err
		}
		for _, vf := range vfs {
			u, err := c.inverse(Op{Kind: OpDriver, Device: vf.Address})
			if err != nil {
				return nil, err
			}
			undo = append(undo, u...)
		}
		// The script's rebind clears mixed-size mode: it comes back after
		// the VFs (undone last to first).
		if c.mixedSizeOn(o) {
			undo = append([]Op{{Kind: OpNVMixedSize, Device: o.Device, Count: 1}}, undo...)
		}
		return append(undo, Op{Kind: OpSriovManage, Device: o.Device, Count: min(n, 1)}), nil
	case OpGIMReload:
		// Back to the count and scheduler gim had. A gim that was not
		// loaded (a reload cut off half-way) has nothing to go back to:
		// it stays loaded.
		state, err := inventory.ReadGIM(c.fs)
		if err != nil || state == nil {
			return nil, err
		}
		n, err := sriov.NumVFs(c.fs, o.Device)
		if err != nil {
			return nil, err
		}
		return c.autoprobeUndo(o, Op{Kind: OpGIMReload, Device: o.Device, Count: n, Params: stateParams(state)})
	case OpAMDSMINumVF:
		return c.amdSMIInverse(o)
	case OpMIGMode, OpGICreate, OpGIDestroy, OpGIPrune:
		return c.migInverse(o)
	case OpMdevCreate:
		parent, err := c.mdevParent(o)
		if err != nil {
			return nil, nil
		}
		return []Op{{Kind: OpMdevRemove, Parent: parent, Type: o.Type, UUID: o.UUID}}, nil
	case OpMdevRemove:
		return []Op{{Kind: OpMdevCreate, Parent: o.Parent, Type: o.Type, UUID: o.UUID}}, nil
	case OpNVType:
		dev, err := c.resolve(o)
		if err != nil {
			return nil, nil
		}
		_, cur, _, err := nvvf.Read(c.fs, dev)
		if err != nil {
			return nil, err
		}
		return []Op{{Kind: OpNVType, Device: dev, Count: cur}}, nil
	case OpXeSched:
		return c.xeInverse(o)
	case OpNVParams:
		// None: the driver reads them only when a VM starts, and every
		// prepare writes them anew.
		return nil, nil
	case OpNVScheduler:
		return c.schedInverse(o)
	case OpNVMixedSize:
		return c.mixedSizeInverse(o)
	}
	return nil, fmt.Errorf("unknown op %q", o.Kind)
}

func (c *Carver) mdevParent(o Op) (string, error) {
	if o.Parent != "" {
		return o.Parent, nil
	}
	dev, err := c.resolve(o)
	if err != nil {
		return "", err
	}
	return dev.String(), nil
}

// exec performs one op. Each is idempotent: it first compares live state.
func (c *Carver) exec(ctx context.Context, o Op) error {
	switch o.Kind {
	case OpDriver:
		dev, err := c.resolve(o)
		if err != nil {
			return err
		}
		cur, err := pci.CurrentDriver(c.fs, dev)
		if err != nil {
			return err
		}
		if cur != o.To {
			// VFs vanish with sriov_numvfs=0; only whole functions need their driver back.
			if o.To == vfioPCI && cur != "" && o.VF == nil {
				if err := c.drivers.RememberDriver(dev, cur); err != nil {
					return fmt.Errorf("remember the driver %s of %s: %w", cur, dev, err)
				}
			}
			if o.To == "" {
				err = pci.Unbind(c.fs, dev)
			} else {
				err = pci.Bind(ctx, c.fs, dev, o.To)
			}
			if err != nil {
				return err
			}
		}
		if o.Override != nil {
			ov, err := pci.DriverOverride(c.fs, dev)
			if err != nil {
				return err
			}
			if ov != *o.Override {
				return pci.SetDriverOverride(c.fs, dev, *o.Override)
			}
		}
		return nil
	case OpAutoprobe:
		return c.setAutoprobe(o.Device, *o.Autoprobe)
	case OpNumVFs:
		if o.Autoprobe != nil && o.Count > 0 {
			return c.enableVFs(o)
		}
		return sriov.SetNumVFs(c.fs, o.Device, o.Count)
	case OpSriovManage:
		return c.sriovManage(ctx, o.Device, o.Count > 0)
	case OpGIMReload:
		return c.gimReload(ctx, o)
	case OpAMDSMINumVF:
		return c.amdSMINumVF(ctx, o)
	case OpMIGMode, OpGICreate, OpGIDestroy, OpGIPrune:
		return c.migExec(o)
	case OpMdevCreate:
		parent, err := c.mdevParent(o)
		if err != nil {
			return err
		}
		// The kernel's answer says whether it exists already (done).
		if err := mdev.Create(c.fs, parent, o.Type, o.UUID); !errors.Is(err, mdev.ErrExists) {
			return err
		}
		return nil
	case OpMdevRemove:
		if err := mdev.Remove(c.fs, o.UUID); !errors.Is(err, mdev.ErrNotFound) {
			return err
		}
		return nil
	case OpNVType:
		dev, err := c.resolve(o)
		if err != nil {
			return err
		}
		_, cur, _, err := nvvf.Read(c.fs, dev)
		if err != nil {
			return err
		}
		if cur == o.Count {
			return nil
		}
		if cur != 0 {
			if err := nvvf.ClearType(c.fs, dev); err != nil {
				return err
			}
		}
		if o.Count == 0 {
			return nil
		}
		return nvvf.SetType(c.fs, dev, o.Count)
	case OpXeSched:
		return c.xeSched(o)
	case OpNVParams:
		dir := sysfs.MdevDevices + "/" + o.UUID
		if o.UUID == "" {
			dir = pci.DevicePath(o.Device)
		}
		return nvvf.SetParams(c.fs, dir, o.Value)
	case OpNVScheduler:
		return c.schedExec(o)
	case OpNVMixedSize:
		return c.mixedSizeExec(o)
	}
	return fmt.Errorf("unknown op %q", o.Kind)
}

// autoprobeUndo is the undo of a driver's re-creation of VFs (o): count,
// which puts the count back, and, when o sets sriov_drivers_autoprobe,
// the setting. Undone last to first: the setting, so that the VFs put
// back land where they were (old GIM's on pci-stub), then the count.
func (c *Carver) autoprobeUndo(o, count Op) ([]Op, error) {
	undo := []Op{count}
	if o.Autoprobe != nil {
		was, err := sriov.Autoprobe(c.fs, o.Device)
		if err != nil {
			return nil, err
		}
		undo = append(undo, Op{Kind: OpAutoprobe, Device: o.Device, Autoprobe: &was})
	}
	return undo, nil
}

// enableVFs sets sriov_numvfs with sriov_drivers_autoprobe at o.Autoprobe
// while the VFs appear; the op's undo restores both when any write fails.
func (c *Carver) enableVFs(o Op) error {
	return c.withAutoprobe(o.Device, o.Autoprobe, func() error { return sriov.SetNumVFs(c.fs, o.Device, o.Count) })
}

// sriovManage runs NVIDIA's sriov-manage until pf has VFs (enable) or none.
// The script prints "Cannot obtain unbindLock" while an NVML client holds
// the GPU, and older versions still exit 0, so the outcome is read back
// from sriov_numvfs; the refusal is retried, anything else is not.
func (c *Carver) sriovManage(ctx context.Context, pf pci.Address, enable bool) error {
	flag, verb := "-d", "disable the VFs of"
	if enable {
		flag, verb = "-e", "enable the VFs of"
	}
	done := func() (bool, error) {
		n, err := sriov.NumVFs(c.fs, pf)
		return (n > 0) == enable, err
	}
	for attempt := 1; ; attempt++ {
		if ok, err := done(); err != nil || ok {
			return err
		}
		out, err := sysfs.RunTool(ctx, c.fs, sysfs.ToolSriovManage, flag, pf.String())
		if errors.Is(err, sysfs.ErrNoTool) {
			return fmt.Errorf("%s %s: %w", verb, pf, err)
		}
		locked := strings.Contains(strings.ToLower(string(out)), "obtain unbindlock")
		ok, rerr := done()
		if rerr != nil {
			return rerr
		}
		if ok {
			// The script goes on past a failed write: the PF may be left
			// off nvidia. The op's undo puts it back.
			drv, derr := pci.CurrentDriver(c.fs, pf)
			if derr != nil || drv == "nvidia" {
				return derr
			}
			return fmt.Errorf("%s %s with sriov-manage %s: %w: it left the PF %s; it said: %s",
				verb, pf, flag, ErrVendorTool, driverState(drv), sysfs.LastLine(out))
		}
		if locked && attempt < c.toolTries {
			c.log.Warn("sriov-manage: the nvidia driver refused its unbind lock; retrying", "gpu", pf, "attempt", attempt)
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s %s with sriov-manage %s: %w", verb, pf, flag, ctx.Err())
			case <-time.After(time.Duration(attempt) * c.toolWait):
			}
			continue
		}
		var why string
		switch {
		case locked:
			why = fmt.Sprintf("the nvidia driver refused its unbind lock %d times: an NVML client (nvidia-smi, DCGM, a monitoring agent) holds the GPU; stop it and try again", attempt)
		case err != nil && errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%s %s: %w: %w (sriov-manage comes with NVIDIA's vGPU host driver; give its path with --sriov-manage)", verb, pf, ErrVendorTool, err)
		case err != nil:
			return fmt.Errorf("%s %s: %w: %w", verb, pf, ErrVendorTool, err)
		case enable:
			why = "it exited 0 and the GPU still has no VFs (is it an SR-IOV vGPU GPU, with the vGPU host driver loaded?)"
		default:
			why = "it exited 0 and the GPU still has VFs"
		}
		if line := sysfs.LastLine(out); line != "" && !locked {
			why += "; it said: " + line
		}
		return fmt.Errorf("%s %s with sriov-manage %s: %w: %s", verb, pf, flag, ErrVendorTool, why)
	}
}
