package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/client/clienttest"
	"github.com/vgpu-project/vgpu/pkg/daemon/metrics"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/engine/enginetest"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Domains of the tests.
const (
	domA = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
	domB = "8f5b7e2a-0c1d-4e3f-9a8b-7c6d5e4f3a2b"
	// Deterministic mdev identities, as the hook would name them.
	mdevA0 = "0b4c2a51-7a3e-5d61-9c1f-2e8d6b4a3c10"
	mdevA1 = "0b4c2a51-7a3e-5d61-9c1f-2e8d6b4a3c11"
	mdevB0 = "1c5d3b62-8b4f-5e72-ad20-3f9e7c5b4d20"
)

// Configs of the tests, for examples/hosts/mixed.yaml.
const (
	cfgMixed        = enginetest.MixedConfig
	cfgMixedDestroy = enginetest.MixedConfigDestroy
)

// rig is a vgpud running in process on the fake kernel, with its socket
// in a temp dir and a client on it.
type rig struct {
	t        testing.TB
	k        *simkernel.Kernel
	d        *Daemon
	c        *client.Client
	srv      *clienttest.Server
	cfgPath  string
	stateDir string
	socket   string
	reload   chan struct{}
	// profileDirs are extra catalog dirs (vgpud --profiles).
	profileDirs []string
	// forceWait is vgpud's ForceWait (0: its default).
	forceWait time.Duration
	// mig is vgpud's NVML for MIG (nil: its default, the real library).
	mig nvstate.Manager
	// peer, when set, is who every API connection is from (else the
	// kernel's SO_PEERCRED: this root test process); cred, when set, says
	// it per connection.
	peer *Peer
	cred func(net.Conn) (Peer, error)
	// limits, when set, are the API connections' (else DefaultConnLimits).
	limits *ConnLimits
	// log, when set, is vgpud's logger.
	log *slog.Logger
	// domains, events and grace are vgpud's view of libvirt (nil: none).
	domains engine.DomainSource
	events  chan struct{}
	grace   time.Duration
	// mdevctlDir is mdevctl's definitions (vgpud --mdevctl-dir; "" none).
	mdevctlDir string
	// fs, when set, is what vgpud reads the kernel through (else k).
	fs sysfs.FS
}

// shortTemp is a temp dir short enough for a unix socket path (108 bytes).
func shortTemp(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vgpud")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// start runs a daemon on k with config yaml ("" = no file) and waits until
// its socket answers.
func start(t testing.TB, k *simkernel.Kernel, yaml string, profileDirs ...string) *rig {
	t.Helper()
	r := newRig(t, k, yaml, profileDirs...)
	r.run()
	return r
}

// startMixed is start on the mixed host with cfgMixed.
func startMixed(t testing.TB) *rig {
	t.Helper()
	return start(t, simkernel.NewExample(t, "mixed.yaml"), cfgMixed)
}

// newRig is start without the run: set the rig's options, then run it.
func newRig(t testing.TB, k *simkernel.Kernel, yaml string, profileDirs ...string) *rig {
	t.Helper()
	dir := shortTemp(t)
	r := &rig{t: t, k: k, profileDirs: profileDirs, cfgPath: filepath.Join(dir, "etc", "config.yaml"), stateDir: filepath.Join(dir, "state"),
		socket: filepath.Join(dir, "run", "vgpud.sock")}
	if yaml != "" {
		if err := engine.WriteConfig(r.cfgPath, []byte(yaml)); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func (r *rig) run() {
	r.t.Helper()
	cred := r.cred
	if r.peer != nil {
		cred = func(net.Conn) (Peer, error) { return *r.peer, nil }
	}
	log := r.log
	if log == nil {
		log = enginetest.Logger()
	}
	var fs sysfs.FS = r.k
	if r.fs != nil {
		fs = r.fs
	}
	d, err := New(Options{ConfigPath: r.cfgPath, FS: fs, StateDir: r.stateDir, SocketPath: r.socket, ProfileDirs: r.profileDirs,
		Logger: log, LookupGroup: func(string) (int, error) { return os.Getgid(), nil }, PeerCred: cred,
		Domains: r.domains, DomainEvents: r.events, CollectGrace: r.grace, Metrics: metrics.New(nil), ForceWait: r.forceWait, MIG: r.mig,
		MdevctlDir: r.mdevctlDir})
	if err != nil {
		r.t.Fatal(err)
	}
	if r.limits != nil {
		d.limits = *r.limits
	}
	r.d = d
	reload := make(chan struct{})
	r.reload = reload
	r.c = client.New(r.socket)
	r.srv = clienttest.Serve(r.t, r.c, func(ctx context.Context) error { return d.Run(ctx, reload) })
}

// stop stops the daemon (idempotent) and fails the test on a bad exit.
func (r *rig) stop() {
	if r.srv != nil {
		r.srv.Stop()
	}
}

// restart stops the daemon and starts a new one on the same state.
func (r *rig) restart() {
	r.t.Helper()
	r.stop()
	r.run()
}

func (r *rig) writeConfig(yaml string) {
	r.t.Helper()
	if err := engine.WriteConfig(r.cfgPath, []byte(yaml)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) allocations() []ledger.Allocation {
	r.t.Helper()
	as, err := r.d.ledger.Allocations()
	if err != nil {
		r.t.Fatal(err)
	}
	return as
}

// wantErr checks err matches sentinel.
func wantErr(t *testing.T, err, sentinel error, what string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: err = %v, want %v", what, err, sentinel)
	}
}

var bg = context.Background()
