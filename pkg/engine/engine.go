package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// viewTTL bounds how stale the cached host view may be. vgpud makes every
// change itself and drops the view after each, so the TTL only covers
// changes made behind its back.
const viewTTL = 2 * time.Second

// Engine reconciles one host to its config and runs the allocation
// lifecycle. Safe for concurrent use.
//
// Locking: host is held exclusively by everything that writes to the
// kernel (reconcile, carve, prepare, release) and shared by allocation
// decisions that only write the ledger (reserve, lease), so a vGPU is never
// chosen from a view a concurrent kernel change is about to invalidate.
type Engine struct {
	fs      sysfs.FS
	ledger  *ledger.Ledger
	catalog *profile.Catalog
	alloc   *alloc.Allocator
	carver  *carve.Carver
	mig     nvstate.Manager // for Assert; nil: none
	locks   *carve.Locker
	log     *slog.Logger
	metrics Recorder

	host sync.RWMutex

	cfgMu sync.RWMutex
	cfg   *config.Config

	viewMu sync.Mutex
	view   *hostView
	// viewGen counts the drops of view and desired (viewMu): a discovery
	// that began before one keeps neither. discoverMu serialises the
	// discoveries, which run outside viewMu so that a targeted view
	// (viewOf: a claim, a prepare) never waits for a whole host's.
	viewGen    uint64
	discoverMu sync.Mutex
	// types keeps the fixed attributes of mdev types per registration of
	// their parent: views read only the live counters of each again.
	types *mdev.TypeCache
	// desired is the config's profile per GPU as of the last full view:
	// targeted views (viewOf) take their labels from it.
	desired map[pci.Address]string

	lastMu sync.Mutex
	last   ReconcileSummary

	// changing holds the GPUs (addresses) and virtual parents (names) a
	// manual carve or uncarve works on, outside the host lock.
	changeMu sync.Mutex
	changing map[string]bool

	forceWait time.Duration // a forced change's caller waits this long at most

	mdevctlDir string // "" : no mdevctl to keep clear of

	domains DomainSource // nil: libvirt's domains are not known
	feed    changeFeed   // Changes
	goneMu  sync.Mutex
	gone    map[string]time.Time // domain UUID -> first seen gone from libvirt
}

// ReconcileSummary is the outcome of the last reconcile, for health and metrics.
type ReconcileSummary struct {
	At    time.Time
	Drift int
}

// EngineOptions are what an Engine works on. FS, Ledger and Catalog are required.
type EngineOptions struct {
	FS      sysfs.FS
	Ledger  *ledger.Ledger
	Catalog *profile.Catalog
	// Config is the host config; nil means config.Default() (no GPU managed).
	Config *config.Config
	// LockDir holds the per-GPU lock files shared with vgpuctl.
	LockDir string
	Logger  *slog.Logger
	// Metrics records operations; nil records nothing.
	Metrics Recorder
	// Domains, when set, says which domains libvirt knows: Free refuses a
	// running one, Collect frees the vGPUs of gone ones.
	Domains DomainSource
	// ForceWait bounds how long a forced carve or uncarve's caller waits
	// (DefaultForceWait when 0; negative: until it ends).
	ForceWait time.Duration
	// MIG is NVML for MIG-backed profiles (nil: they are refused).
	MIG nvstate.Manager
	// MdevctlDir is mdevctl's definitions directory: a config or a carve
	// that would manage a parent mdevctl starts mdevs on is refused
	// (pkg/mdevctl). "" checks nothing.
	MdevctlDir string
}

// NewEngine returns an Engine. The carver uses the ledger as driver store
// and as usage checker (an allocated vGPU is never destroyed), besides its
// own VFIO check.
func NewEngine(o EngineOptions) (*Engine, error) {
	if o.FS == nil || o.Ledger == nil || o.Catalog == nil {
		return nil, fmt.Errorf("new engine: FS, Ledger and Catalog are required")
	}
	if o.Config == nil {
		o.Config = config.Default()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = noRecorder{}
	}
	if o.LockDir == "" {
		o.LockDir = filepath.Join(filepath.Dir(o.Ledger.Path()), "locks")
	}
	if o.ForceWait == 0 {
		o.ForceWait = DefaultForceWait
	}
	e := &Engine{fs: o.FS, ledger: o.Ledger, catalog: o.Catalog, log: o.Logger, metrics: o.Metrics, cfg: o.Config,
		domains: o.Domains, gone: map[string]time.Time{}, changing: map[string]bool{}, forceWait: o.ForceWait, mdevctlDir: o.MdevctlDir,
		types: mdev.NewTypeCache()}
	e.locks = carve.NewLocker(o.LockDir)
	e.alloc = alloc.New(o.Ledger, o.Catalog)
	e.mig = o.MIG
	copts := []carve.Option{carve.WithUsage(o.Ledger), carve.WithLocker(e.locks), carve.WithLogger(o.Logger),
		carve.WithAutoprobeJournal(o.Ledger)}
	if o.MIG != nil {
		copts = append(copts, carve.WithMIG(o.MIG))
	}
	e.carver = carve.New(o.FS, o.Catalog, o.Ledger, copts...)
	e.metrics.Watch(func(ctx context.Context) ([]api.VGPU, error) {
		vs, _, err := e.VGPUs(ctx)
		return vs, err
	})
	o.Ledger.OnCommit(e.feed.committed)
	return e, nil
}

// Config is the config the engine works to.
func (e *Engine) Config() *config.Config {
	e.cfgMu.RLock()
	defer e.cfgMu.RUnlock()
	return e.cfg
}

// SetConfig replaces the config; the next reconcile applies it.
func (e *Engine) SetConfig(c *config.Config) {
	e.cfgMu.Lock()
	e.cfg = c
	e.cfgMu.Unlock()
	e.setDesired(nil) // its labels are the old config's: the next view reads the host
}

// setDesired records the config's profile per GPU for targeted views.
func (e *Engine) setDesired(d map[pci.Address]string) {
	e.viewMu.Lock()
	e.desired = d
	e.viewGen++
	e.viewMu.Unlock()
}

// FS is what the engine reads and writes the kernel through.
func (e *Engine) FS() sysfs.FS { return e.fs }

// Catalog is the profile catalog.
func (e *Engine) Catalog() *profile.Catalog { return e.catalog }

// Ledger is the engine's ledger.
func (e *Engine) Ledger() *ledger.Ledger { return e.ledger }

// Metrics is the engine's recorder.
func (e *Engine) Metrics() Recorder { return e.metrics }

// LastReconcile is the outcome of the last reconcile.
func (e *Engine) LastReconcile() ReconcileSummary {
	e.lastMu.Lock()
	defer e.lastMu.Unlock()
	return e.last
}

// hostView is the host as discovered at one moment: its GPUs and the vGPUs
// carved on them, each labelled with the profile it serves. Immutable.
type hostView struct {
	at    time.Time
	gpus  []inventory.GPU
	addrs []string    // gpus[i].Address.String(): the plugin asks after each change
	vgpus []vgpu.VGPU // InUse not filled: that is probed per request
	// actual is the profile each GPU carries (ProfileOf); desired the config's.
	actual, desired map[pci.Address]string
}

func (v *hostView) gpu(a pci.Address) (inventory.GPU, bool) {
	for _, g := range v.gpus {
		if g.Address == a {
			return g, true
		}
	}
	return inventory.GPU{}, false
}

func (v *hostView) vgpu(id string) (vgpu.VGPU, bool) {
	for _, x := range v.vgpus {
		if x.ID == id {
			return x, true
		}
	}
	return vgpu.VGPU{}, false
}

// invalidate drops the cached view; callers that changed the kernel call it.
func (e *Engine) invalidate() {
	e.viewMu.Lock()
	e.view = nil
	e.viewGen++
	e.viewMu.Unlock()
	e.feed.notify()
}

// currentView returns the cached view, discovering the host again when it
// is older than viewTTL, or always when fresh is set.
// The discovery runs outside viewMu: a claim's targeted view does not
// wait for it (the mutex profile of BenchmarkAllocate64x16 had Allocate's
// tail waiting for the plugin's relist of 64 GPUs once the TTL ran out).
func (e *Engine) currentView(ctx context.Context, fresh bool) (*hostView, error) {
	e.discoverMu.Lock()
	defer e.discoverMu.Unlock()
	e.viewMu.Lock()
	if v := e.view; !fresh && v != nil && time.Since(v.at) < viewTTL {
		e.viewMu.Unlock()
		return v, nil
	}
	gen := e.viewGen
	e.viewMu.Unlock()
	v, desired, err := e.discover(ctx)
	if err != nil {
		return nil, err
	}
	e.viewMu.Lock()
	if e.viewGen == gen { // else dropped meanwhile: the next caller reads again
		e.view, e.desired = v, desired
	}
	e.viewMu.Unlock()
	return v, nil
}

// discover reads the whole host: its view and the config's profile per
// GPU.
func (e *Engine) discover(ctx context.Context) (*hostView, map[pci.Address]string, error) {
	gpus, err := inventory.Discover(mdev.WithTypeCache(e.fs, e.types), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("discover the host's GPUs: %w", err)
	}
	desired := desiredProfiles(e.Config().Desired(gpus, e.catalog))
	v, err := e.build(ctx, gpus, true, e.parentProfiles(), desired)
	return v, desired, err
}

// desiredProfiles maps each GPU a config's assignments name to its
// profile. A config that does not fit the host (err) labels nothing:
// reconcile reports it.
func desiredProfiles(as []config.Assignment, err error) map[pci.Address]string {
	desired := map[pci.Address]string{}
	if err == nil {
		for _, a := range as {
			desired[a.GPU] = a.Profile
		}
	}
	return desired
}

// parentProfiles maps each virtual mdev parent the config names to its
// profile.
func (e *Engine) parentProfiles() map[string]string {
	parents := map[string]string{}
	if ps, err := e.Config().DesiredParents(e.catalog); err == nil {
		for _, p := range ps {
			parents[p.Parent] = p.Profile
		}
	}
	return parents
}

// build makes a view of gpus and, with virtual, of every virtual mdev
// parent, labelled with desired and parents (name -> the config's profile).
func (e *Engine) build(ctx context.Context, gpus []inventory.GPU, virtual bool, parents map[string]string, desired map[pci.Address]string) (*hostView, error) {
	for i := range gpus {
		// The ids of types the catalog names only, as NVML last gave them:
		// views serve the API, which never waits for NVML (reconcile asks).
		e.carver.EnrichKnown(&gpus[i])
	}
	// Each GPU's profile once: the vGPUs are labelled with it.
	actual := make([]string, len(gpus))
	for i, g := range gpus {
		actual[i] = carve.ProfileOf(g, e.catalog)
	}
	vgpus, err := carve.VGPUsLabelled(ctx, e.fs, gpus, e.catalog, actual)
	if err != nil {
		return nil, fmt.Errorf("list the host's vGPUs: %w", err)
	}
	// Virtual mdev parents (mbochs): their mdevs are vGPUs too, labelled
	// with the config's profile when they have its type, else with the
	// profile the parent carries: a parent the config does not name may
	// have been carved by hand (vgpuctl carve mbochs), as a GPU may.
	if virtual {
		pv, err := carve.ParentVGPUs(ctx, e.fs, e.catalog, parents)
		if err != nil {
			return nil, fmt.Errorf("list the vGPUs of the host's virtual mdev parents: %w", err)
		}
		vgpus = append(vgpus, pv...)
	}
	v := &hostView{at: time.Now(), gpus: gpus, addrs: make([]string, len(gpus)), vgpus: vgpus, actual: map[pci.Address]string{}, desired: map[pci.Address]string{}}
	for i, g := range gpus {
		v.addrs[i] = g.Address.String()
		v.actual[g.Address] = actual[i]
		if p, ok := desired[g.Address]; ok {
			v.desired[g.Address] = p
			// Of two profiles of one shape (vgpu_params apart), the GPU
			// carries the config's.
			if old := v.actual[g.Address]; old != "" && old != p && carve.Carries(g, e.catalog, p) {
				v.actual[g.Address] = p
				for i := range v.vgpus {
					if v.vgpus[i].GPU == g.Address.String() && v.vgpus[i].Profile == old {
						v.vgpus[i].Profile = p
					}
				}
			}
		}
	}
	for i := range v.vgpus {
		if v.vgpus[i].Profile == "" {
			v.vgpus[i].Profile = v.partialProfile(v.vgpus[i], e.catalog)
		}
	}
	return v, nil
}

// viewOf is a fresh view of only the GPUs and virtual mdev parents named
// by owners (addresses, parent names): what a prepare or a release hands
// out, so their cost does not grow with the host. The config's labels come
// from the last full view.
func (e *Engine) viewOf(ctx context.Context, owners []string) (*hostView, error) {
	// The lock only for the labels: a relist of the whole host (the view's
	// TTL ran out) must not hold up a prepare that reads one GPU.
	e.viewMu.Lock()
	desired := e.desired
	e.viewMu.Unlock()
	if desired == nil {
		if _, err := e.currentView(ctx, true); err != nil {
			return nil, err
		}
		e.viewMu.Lock()
		desired = e.desired
		e.viewMu.Unlock()
		if desired == nil { // dropped again meanwhile: label nothing
			desired = map[pci.Address]string{}
		}
	}
	var gpus []inventory.GPU
	virtual := false
	seen := map[string]bool{}
	for _, o := range owners {
		if seen[o] {
			continue
		}
		seen[o] = true
		a, err := pci.ParseAddress(o)
		if err != nil {
			virtual = true
			continue
		}
		// Lean: a type's available_instances only where it counts for
		// the GPU's label (mdev.Counted); this view is never listed.
		g, err := inventory.Get(mdev.LeanWithTypeCache(e.fs, e.types), nil, a)
		switch {
		case errors.Is(err, pci.ErrNoDevice), errors.Is(err, inventory.ErrNotGPU), errors.Is(err, inventory.ErrIsVF):
			continue // not a GPU (any more): its vGPUs are simply not in the view
		case err != nil:
			return nil, fmt.Errorf("read GPU %s: %w", a, err)
		}
		gpus = append(gpus, g)
	}
	v, err := e.build(ctx, gpus, virtual, e.parentProfiles(), desired)
	if err != nil {
		return nil, err
	}
	// ParentVGPUs lists every virtual parent: keep those asked for.
	v.vgpus = slices.DeleteFunc(v.vgpus, func(x vgpu.VGPU) bool { return !seen[x.GPU] })
	return v, nil
}

// partialProfile labels a vGPU of a GPU that is only partly as its
// profile wants (one mdev destroyed by a release, one NVIDIA type cleared)
// with the config's profile when the vGPU has that profile's shape, so
// the rest of the GPU's vGPUs stay allocatable until reconcile makes the
// GPU whole.
func (v *hostView) partialProfile(x vgpu.VGPU, cat *profile.Catalog) string {
	ga, err := pci.ParseAddress(x.GPU)
	if err != nil {
		return ""
	}
	want := v.desired[ga]
	g, ok := v.gpu(ga)
	if want == "" || !ok {
		return ""
	}
	pl, err := cat.Resolve(want, g)
	if err != nil {
		return ""
	}
	switch pl.Dialect {
	case inventory.DialectMdev, inventory.DialectSRIOVMdev:
		if x.Kind == vgpu.KindMdev && x.Type == pl.MdevType {
			return want
		}
	case inventory.DialectNVIDIAVF:
		if x.Kind == vgpu.KindNVIDIAVF && g.SRIOV != nil {
			for _, vf := range g.SRIOV.VFs {
				if vf.Address.String() == x.ID && vf.NVIDIA != nil && vf.NVIDIA.CurrentType == pl.NVIDIATypeID {
					return want
				}
			}
		}
	case inventory.DialectSRIOV:
		if x.Kind == vgpu.KindVF && g.SRIOV != nil && g.SRIOV.NumVFs == pl.NumVFs {
			return want
		}
	}
	return ""
}

// candidates are the view's vGPUs for alloc, with NUMA nodes, and the
// free ones of profile checked for VFIO users (a process outside vgpu's
// ledger may hold one: a VM started by hand); with probe, only the free
// ones it names.
func (e *Engine) candidates(ctx context.Context, v *hostView, profileName string, probe func(id string) bool) ([]alloc.Candidate, error) {
	cs := alloc.Candidates(slices.DeleteFunc(slices.Clone(v.vgpus), func(x vgpu.VGPU) bool { return e.Changing(x.GPU) }), v.gpus)
	held := map[string]bool{}
	err := e.ledger.View(func(tx *ledger.Tx) error {
		as, err := tx.Allocations()
		if err != nil {
			return err
		}
		for _, a := range as {
			held[a.VGPU] = true
		}
		ls, err := tx.Leases()
		for _, l := range ls {
			held[l.VGPU] = true
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	usage := carve.VFIOUsage{FS: e.fs}.Snapshot()
	pinned := e.pinned()
	for i := range cs {
		if cs[i].Profile != profileName || held[cs[i].ID] || probe != nil && !probe(cs[i].ID) {
			continue
		}
		if pinned[cs[i].ID] {
			// Kept for the domain whose XML names it: a swap would take
			// its UUID away.
			cs[i].InUse, cs[i].Holder = true, pinnedHolder
			continue
		}
		h, in, err := usage.Holder(ctx, cs[i].ID)
		// A vGPU of unknown use may be handed out: giving it destroys
		// nothing, and a VM's open of one a hidden process holds fails.
		if err != nil && !errors.Is(err, carve.ErrUseUnknown) {
			return nil, fmt.Errorf("check whether vGPU %s is in use: %w", cs[i].ID, err)
		}
		cs[i].InUse, cs[i].Holder = in, h
	}
	return cs, nil
}

// pinnedHolder says why an mdev whose UUID the config pins is never handed
// out.
const pinnedHolder = "pinned by the host config (mdev-uuids): kept for the domain whose XML names it"

// pinned is the set of mdev UUIDs the config in force pins.
func (e *Engine) pinned() map[string]bool {
	out := map[string]bool{}
	for _, g := range e.Config().GPUs {
		for _, u := range g.MdevUUIDs {
			out[u] = true
		}
	}
	return out
}
