package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"

	"github.com/vgpu-project/vgpu/internal/change"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/mdevctl"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvstaterpc"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/version"
)

// Options configure a Daemon.
type Options struct {
	ConfigPath string // default config.DefaultPath
	// SysfsRoot is where sys/ and dev/ are ("/"; a vgpusim mount); FS,
	// when set, is used instead (in-process tests: the fake kernel).
	SysfsRoot string
	// SriovManage is the path of NVIDIA's sriov-manage; "" its install
	// path under SysfsRoot.
	SriovManage string
	// AMDSMI is the path of new AMD GIM's amd-smi; "" its install path
	// under SysfsRoot.
	AMDSMI string
	// NVMLLibrary is NVIDIA's NVML, which MIG-backed profiles need; ""
	// the library's usual name. vgpu-nvml loads it, started only when such
	// a profile is carved, so a host without it serves every other GPU.
	// MIG, when set, is used instead (in-process tests: internal/sim/nvml).
	NVMLLibrary string
	MIG         nvstate.Manager
	FS          sysfs.FS
	StateDir    string // default DefaultStateDir: ledger.db and locks/
	SocketPath  string // default api.DefaultSocket
	ProfileDirs []string
	Logger      *slog.Logger
	// LookupGroup resolves the socket's group (default: the system's groups).
	LookupGroup func(name string) (int, error)
	// PeerCred says who is on the other end of an API connection (default:
	// the kernel's SO_PEERCRED).
	PeerCred func(net.Conn) (Peer, error)
	// Domains says which domains libvirt knows (nil: vgpud never frees a
	// vGPU on its own; expired leases are still swept). DomainEvents wakes
	// the collection after libvirt's lifecycle events.
	Domains      engine.DomainSource
	DomainEvents <-chan struct{}
	// CollectEvery and CollectGrace: how often the ledger is checked against
	// libvirt's domains, and how long a domain must be gone before its vGPUs
	// are freed (DefaultCollectEvery, DefaultCollectGrace when 0).
	CollectEvery, CollectGrace time.Duration
	// Metrics records operations and serves /metrics (vgpud: Prometheus,
	// pkg/daemon/metrics); nil records nothing and serves 404.
	Metrics engine.Recorder
	// ForceWait: EngineOptions.ForceWait.
	ForceWait time.Duration
	// MdevctlDir is mdevctl's definitions directory (EngineOptions): ""
	// is etc/mdevctl.d under SysfsRoot, or none when FS is given (an
	// in-process kernel has no mdevctl).
	MdevctlDir string
	// PodResourcesEvery is how often the device plugin asks the kubelet
	// which pods hold vGPUs (deviceplugin.DefaultPodResourcesEvery when
	// 0); the pods' grace is CollectGrace's.
	PodResourcesEvery time.Duration
	// DevicePlugin makes the kubelet's device plugin when the config turns
	// it on: cmd/vgpud passes pkg/deviceplugin's, which links gRPC, so that
	// the static vgpuctl, whose in-process engine serves no kubelet, does
	// not. nil: none.
	DevicePlugin func(engine.PluginOptions) (engine.Runner, error)
	// KernelEvents, when set, says the kernel's devices changed (an
	// in-process kernel's uevents); else, serving the kubelet on the real
	// host, vgpud listens to the kernel's uevent socket.
	KernelEvents <-chan struct{}
}

// Daemon is vgpud: the engine, its ledger, the API socket, systemd
// notification, signals and metrics.
type Daemon struct {
	opts    Options
	log     *slog.Logger
	engine  *engine.Engine
	ledger  *ledger.Ledger
	started time.Time
	loaded  atomic.Bool // a config file was read (else: no GPU managed)

	stopping atomic.Bool
	limits   ConnLimits // the API connections' (DefaultConnLimits)
	gate     *gate      // the API socket's listener
	ln       net.Listener
	server   *http.Server

	// The admin group's gid as the gate classifies peers (-1: none),
	// resolved for the config generation adminGen.
	adminMu   sync.Mutex
	adminName string
	adminGen  uint64
	adminGID  int

	// cfgMu serialises apply and reload: a SIGHUP during an apply reads
	// the file after the apply wrote it, never an older one over a newer.
	cfgMu      sync.Mutex
	generation atomic.Uint64 // configs put in force since start; 1 = the first

	runtimeMu sync.Mutex // socket group and metrics listener follow the config
	metrics   *http.Server
	metricsAt string // as configured
	bound     string // where it listens ("127.0.0.1:0" becomes a port)

	kube kubeFront // the kubelet's device plugin, when the config asks
}

// New loads the config and the catalog and opens the ledger; it fails
// fast (ledger.ErrLocked) when another vgpud holds the ledger. A missing
// config file means no GPU is managed (a warning); a bad one is ErrConfig.
func New(o Options) (*Daemon, error) {
	if o.ConfigPath == "" {
		o.ConfigPath = config.DefaultPath
	}
	if o.StateDir == "" {
		o.StateDir = engine.DefaultStateDir
	}
	if o.SocketPath == "" {
		o.SocketPath = api.DefaultSocket
	}
	if o.MdevctlDir == "" && o.FS == nil {
		root := o.SysfsRoot
		if root == "" {
			root = "/"
		}
		o.MdevctlDir = mdevctl.DirUnder(root)
	}
	if o.FS == nil {
		fs := sysfs.NewOS(o.SysfsRoot)
		if o.SriovManage != "" || o.AMDSMI != "" {
			fs.Tools = map[string]string{sysfs.ToolSriovManage: o.SriovManage, sysfs.ToolAMDSMI: o.AMDSMI}
		}
		o.FS = fs
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MIG == nil {
		o.MIG = nvstaterpc.Open(o.SysfsRoot, o.NVMLLibrary)
	}
	if o.PeerCred == nil {
		o.PeerCred = peerCred
	}
	if o.LookupGroup == nil {
		o.LookupGroup = lookupGroup
	}
	d := &Daemon{opts: o, log: o.Logger, started: time.Now(), limits: DefaultConnLimits()}
	cfg, loaded, err := d.loadConfig()
	if err != nil {
		return nil, err
	}
	d.loaded.Store(loaded)
	d.generation.Store(1)
	cat, err := profile.Load(o.ProfileDirs...)
	if err != nil {
		return nil, fmt.Errorf("%w: load the profile catalog: %w", engine.ErrConfig, err)
	}
	l, err := ledger.Open(filepath.Join(o.StateDir, engine.LedgerFile))
	if err != nil {
		return nil, err
	}
	d.ledger = l
	d.engine, err = engine.NewEngine(engine.EngineOptions{FS: o.FS, Ledger: l, Catalog: cat, Config: cfg, MIG: o.MIG,
		LockDir: filepath.Join(o.StateDir, engine.LocksDir), Logger: o.Logger, Domains: o.Domains, Metrics: o.Metrics, ForceWait: o.ForceWait,
		MdevctlDir: o.MdevctlDir})
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	if len(cfg.GPUs) > 0 {
		if err := checkModules(d.engine.FS()); err != nil {
			_ = l.Close()
			return nil, err
		}
		d.warnGIM()
	}
	return d, nil
}

// warnGIM says at start, rather than at the first re-split, that vgpud
// cannot reload old AMD GIM here (its unit without the GIM drop-in).
func (d *Daemon) warnGIM() {
	hint := carve.ModuleLoadHint()
	if hint == "" {
		return // the common case: no host walk at start
	}
	gpus, err := inventory.Discover(d.engine.FS(), nil)
	if err != nil {
		return // the first reconcile reports it
	}
	for _, g := range gpus {
		if inventory.IsGIM(g.VendorID, g.DeviceID) {
			d.log.Warn("old AMD GIM drives a GPU here, and vgpud cannot reload it to change a split", "gpu", g.Address, "why", hint)
			return
		}
	}
}

// Engine is the daemon's engine.
func (d *Daemon) Engine() *engine.Engine { return d.engine }

// loadConfig reads the config file; missing means config.Default().
func (d *Daemon) loadConfig() (*config.Config, bool, error) {
	cfg, err := config.Load(d.opts.ConfigPath)
	if errors.Is(err, fs.ErrNotExist) {
		d.log.Warn("no host config: no GPU is managed", "config", d.opts.ConfigPath)
		c := config.Default()
		c.Path = d.opts.ConfigPath
		return c, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", engine.ErrConfig, err)
	}
	if runtimeChanged(config.Default(), cfg) {
		if err := rootOwned(d.opts.ConfigPath); err != nil {
			return nil, false, fmt.Errorf("%w: %s sets who may connect (socket, metrics) but %w", engine.ErrConfig, d.opts.ConfigPath, err)
		}
	}
	return cfg, true, nil
}

// runtimeChanged reports whether next changes who may reach vgpud: the
// socket's groups, the metrics listener, or the kubelet's sockets it
// serves and the directory it makes them in.
func runtimeChanged(cur, next *config.Config) bool {
	return cur.Socket != next.Socket || cur.Metrics != next.Metrics || cur.Kubernetes != next.Kubernetes
}

// rootOwned checks that only root can have written path: owned by uid 0
// and not writable by group or others.
func rootOwned(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("cannot check its owner: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("cannot check its owner")
	}
	if st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("it is owned by uid %d with mode %04o; only a file of root's, writable by root alone, may (chown root %s; chmod go-w %s)",
			st.Uid, fi.Mode().Perm(), path, path)
	}
	return nil
}

// Run starts vgpud and serves until ctx ends: repair and the first
// reconcile, the API socket, READY=1 to systemd, watchdog pings, metrics; a
// value on reload (SIGHUP) reloads the config and reconciles. At the end it
// tells systemd STOPPING=1, finishes the requests in flight, and closes.
func (d *Daemon) Run(ctx context.Context, reload <-chan struct{}) (err error) {
	defer func() { err = errors.Join(err, d.close()) }()
	rep := d.engine.Start(ctx)
	if ctx.Err() != nil {
		return nil
	}
	ln, err := listenUnix(d.opts.SocketPath, d.log)
	if err != nil {
		return err
	}
	cfg := d.engine.Config()
	if err := setSocketAccess(d.opts.SocketPath, cfg.Socket.Group, d.opts.LookupGroup, d.log); err != nil {
		_ = ln.Close()
		return err
	}
	d.gate = newGate(ln, d.limits, d.opts.PeerCred, d.peerClass, d.log)
	d.ln = d.gate
	ln = d.ln
	// A request has 30 s to arrive whole and an idle keep-alive 60 s to be
	// used, less while connections wait (the gate's limits): a slow or
	// silent client cannot hold a connection. Responses have no deadline:
	// a forced carve may wait minutes for a VM to let go.
	d.server = &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 60 * time.Second, ConnContext: connContext, ConnState: d.gate.connState,
		ErrorLog: slog.NewLogLogger(d.log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- d.server.Serve(ln) }()
	d.setMetrics(cfg.Metrics.Listen)
	d.applyKube(cfg.Kubernetes)

	if sent, err := notify(sd.SdNotifyReady); err != nil {
		d.log.Warn("cannot tell systemd we are ready", "err", err)
	} else if sent {
		d.log.Debug("told systemd READY=1")
	}
	d.log.Info("vgpud ready", "version", version.Version, "socket", d.opts.SocketPath, "config", d.opts.ConfigPath,
		"ledger", d.ledger.Path(), "changed", rep.Changed, "drift", rep.Drift)

	wctx, stopWatchdog := context.WithCancel(ctx)
	defer stopWatchdog()
	go d.watchdog(wctx)
	go d.engine.RunCollect(wctx, d.opts.DomainEvents, d.opts.CollectEvery, d.opts.CollectGrace)

	for {
		select {
		case <-ctx.Done():
			return d.shutdown()
		case err := <-served:
			return fmt.Errorf("API server on %s stopped: %w", d.opts.SocketPath, err)
		case <-reload:
			if _, err := d.Reload(ctx); err != nil {
				d.log.Error("reload failed; keeping the config in force", "err", err)
			}
		}
	}
}

// watchdog pings systemd at half of WATCHDOG_USEC while the ledger answers:
// a vgpud whose ledger is wedged stops pinging and gets restarted.
func (d *Daemon) watchdog(ctx context.Context) {
	every, err := watchdogInterval()
	if err != nil {
		d.log.Warn("systemd watchdog", "err", err)
		return
	}
	if every <= 0 {
		return
	}
	d.log.Debug("pinging the systemd watchdog", "every", every)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := d.ledger.View(func(*ledger.Tx) error { return nil }); err != nil {
				d.log.Error("ledger does not answer; not pinging the watchdog", "err", err)
				continue
			}
			if _, err := notify(sd.SdNotifyWatchdog); err != nil {
				d.log.Warn("watchdog ping", "err", err)
			}
		}
	}
}

func (d *Daemon) shutdown() error {
	d.log.Info("stopping")
	if _, err := notify(sd.SdNotifyStopping); err != nil {
		d.log.Warn("cannot tell systemd we are stopping", "err", err)
	}
	d.stopping.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Requests in flight finish: a prepare cut short would leave work for repair.
	err := d.server.Shutdown(ctx)
	if err != nil {
		err = fmt.Errorf("finish the API requests in flight: %w", err)
	}
	return err
}

// close releases everything Run or New took.
func (d *Daemon) close() error {
	var errs []error
	d.stopKube()
	d.setMetrics("")
	if d.ln != nil {
		_ = d.ln.Close()
		if err := os.Remove(d.opts.SocketPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove socket %s: %w", d.opts.SocketPath, err))
		}
	}
	if d.ledger != nil {
		errs = append(errs, d.ledger.Close())
		d.ledger = nil
	}
	return errors.Join(errs...)
}

// Close releases the ledger of a daemon that never ran.
func (d *Daemon) Close() error { return d.close() }

// Reload re-reads the config file and reconciles to it (SIGHUP). A config
// that does not load, or a missing file, is logged and the config in force
// is kept: a stray edit must not uncarve the host.
func (d *Daemon) Reload(ctx context.Context) (api.ReconcileReport, error) {
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	cfg, err := config.Load(d.opts.ConfigPath)
	if err != nil {
		return api.ReconcileReport{}, fmt.Errorf("reload %s: %w", d.opts.ConfigPath, err)
	}
	if err := d.fits(ctx, cfg); err != nil {
		return api.ReconcileReport{}, fmt.Errorf("reload %s: %w", d.opts.ConfigPath, err)
	}
	if runtimeChanged(d.engine.Config(), cfg) {
		if err := rootOwned(d.opts.ConfigPath); err != nil {
			return api.ReconcileReport{}, fmt.Errorf("reload %s: it changes who may connect (socket, metrics) but %w", d.opts.ConfigPath, err)
		}
	}
	gen := d.putInForce(cfg)
	d.log.Info("config reloaded", "config", d.opts.ConfigPath, "gpus", len(cfg.GPUs), "generation", gen)
	rep := d.engine.Reconcile(ctx, engine.ReasonSIGHUP)
	rep.Generation = gen
	return rep, nil
}

// putInForce makes cfg the config in force and returns its generation.
func (d *Daemon) putInForce(cfg *config.Config) uint64 {
	d.engine.SetConfig(cfg)
	d.loaded.Store(true)
	d.applyRuntime(cfg)
	return d.generation.Add(1)
}

// Apply validates yaml against the host, writes it to the config path
// atomically and reconciles to it (POST /v1/apply). With dryRun nothing
// is written and the report lists the ops a reconcile would apply.
func (d *Daemon) Apply(ctx context.Context, source string, yaml []byte, dryRun bool) (api.ReconcileReport, error) {
	if source == "" {
		source = d.opts.ConfigPath
	}
	// Messages name the file the admin gave; once applied, the config is
	// vgpud's own file.
	cfg, err := config.Parse(source, yaml)
	if err != nil {
		return api.ReconcileReport{}, badRequest("config", "%v", err)
	}
	if err := d.fits(ctx, cfg); err != nil {
		var he *httpError
		if errors.As(err, &he) {
			return api.ReconcileReport{}, err
		}
		return api.ReconcileReport{}, badRequest("config", "%v", err)
	}
	if dryRun {
		return engine.PlanReport(d.engine.Assert(ctx, cfg), engine.ReasonApply), nil
	}
	cfg.Path = d.opts.ConfigPath
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	if err := change.Begin(ctx); err != nil {
		return api.ReconcileReport{}, err
	}
	if err := engine.WriteConfig(d.opts.ConfigPath, yaml); err != nil {
		return api.ReconcileReport{}, err
	}
	gen := d.putInForce(cfg)
	d.log.Info("config applied", "config", d.opts.ConfigPath, "gpus", len(cfg.GPUs), "generation", gen)
	rep := d.engine.Reconcile(ctx, engine.ReasonApply)
	rep.Generation = gen
	return rep, nil
}

// fits checks cfg against the host (Engine.Fits): a config that does not
// fit is the client's fault, a host that cannot be read is not.
func (d *Daemon) fits(ctx context.Context, cfg *config.Config) error {
	bad, err := d.engine.Fits(ctx, cfg)
	if err != nil {
		return &httpError{status: 500, body: api.Error{Error: err.Error(), Kind: api.KindInternal}}
	}
	return bad
}

// applyRuntime makes the socket group and the metrics listener follow cfg.
func (d *Daemon) applyRuntime(cfg *config.Config) {
	if d.ln != nil {
		if err := setSocketAccess(d.opts.SocketPath, cfg.Socket.Group, d.opts.LookupGroup, d.log); err != nil {
			d.log.Error("socket access", "err", err)
		}
	}
	if d.server != nil {
		d.setMetrics(cfg.Metrics.Listen)
		d.applyKube(cfg.Kubernetes)
	}
}

// setMetrics serves metrics on addr, replacing the listener when it
// changed; "" serves none. A failure to listen is logged: metrics are
// not worth refusing to serve VMs for.
func (d *Daemon) setMetrics(addr string) {
	d.runtimeMu.Lock()
	defer d.runtimeMu.Unlock()
	if addr == d.metricsAt && (addr == "") == (d.metrics == nil) {
		return
	}
	if d.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = d.metrics.Shutdown(ctx)
		cancel()
		d.metrics, d.metricsAt, d.bound = nil, "", ""
	}
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		d.log.Error("cannot serve metrics", "listen", addr, "err", err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", d.engine.Metrics().Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	d.metrics, d.metricsAt, d.bound = srv, addr, ln.Addr().String()
	d.log.Info("serving metrics", "listen", d.bound)
}

// MetricsAddr is where metrics are served now ("" none).
func (d *Daemon) MetricsAddr() string {
	d.runtimeMu.Lock()
	defer d.runtimeMu.Unlock()
	return d.bound
}

func (d *Daemon) health() api.Health {
	last := d.engine.LastReconcile()
	return api.Health{Status: "ok", Version: version.Version, PID: os.Getpid(), Config: d.opts.ConfigPath,
		ConfigLoaded: d.loaded.Load(), ConfigGeneration: d.generation.Load(), Ledger: d.ledger.Path(), Started: d.started.UTC(), LastReconcile: last.At.UTC(), Drift: last.Drift}
}

// ErrModule: a kernel module vgpu needs is not loaded.
var ErrModule = errors.New("a kernel module vgpu needs is not loaded")

// checkModules refuses to start on a host where handing a device to a VM
// cannot work: without vfio-pci a bind to it leaves the device driverless,
// and without vfio_iommu_type1 QEMU cannot map a VM's memory for it.
// systemd/modules-load.d/vgpu.conf (make install) loads both at boot.
func checkModules(f sysfs.FS) error {
	for _, m := range []struct{ name, path string }{
		{"vfio-pci", sysfs.PCIDrivers + "/vfio-pci"},
		{"vfio_iommu_type1", sysfs.Modules + "/vfio_iommu_type1"},
	} {
		ok, err := sysfs.Exists(f, m.path)
		if err != nil {
			return fmt.Errorf("check that %s is loaded (%s): %w", m.name, m.path, err)
		}
		if !ok {
			return fmt.Errorf("%w: %s (no %s); load it (modprobe %s) and have it loaded at boot: make install puts /etc/modules-load.d/vgpu.conf",
				ErrModule, m.name, m.path, m.name)
		}
	}
	return nil
}
