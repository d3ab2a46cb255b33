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
	"github.com/vgpu-project/vgpu/pkg/daemon/metrics"
	"github.com/vgpu-project/vgpu/pkg/engine"
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
	cfgMixed = `version: v1
gpus:
  - address: "0000:03:00.0"
    profile: mi25-4g
  - address: "0000:3b:00.0"
    profile: t4-4q
  - all: true
    profile: l40s-12q
`
	cfgMixedDestroy = cfgMixed + "on-release: destroy\n"
)

// rig is a vgpud running in process on the fake kernel, with its socket
// in a temp dir and a client on it.
type rig struct {
	t        *testing.T
	k        *simkernel.Kernel
	d        *Daemon
	c        *client.Client
	cfgPath  string
	stateDir string
	socket   string
	cancel   context.CancelFunc
	done     chan error
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

func newKernel(t testing.TB, hostFile string) *simkernel.Kernel {
	t.Helper()
	h, err := simkernel.LoadHost(filepath.Join("..", "..", "examples", "hosts", hostFile))
	if err != nil {
		t.Fatal(err)
	}
	k, err := simkernel.New(h)
	if err != nil {
		t.Fatal(err)
	}
	return k
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

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// start runs a daemon on k with config yaml ("" = no file) and waits until
// its socket answers.
func start(t *testing.T, k *simkernel.Kernel, yaml string, profileDirs ...string) *rig {
	t.Helper()
	r := newRig(t, k, yaml, profileDirs...)
	r.run()
	return r
}

// newRig is start without the run: set the rig's options, then run it.
func newRig(t *testing.T, k *simkernel.Kernel, yaml string, profileDirs ...string) *rig {
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
		log = testLogger(r.t)
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
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done, r.reload = cancel, make(chan error, 1), make(chan struct{})
	go func() { r.done <- d.Run(ctx, r.reload) }()
	r.c = client.New(r.socket)
	deadline := time.Now().Add(10 * time.Second)
	for !r.c.Available(context.Background(), time.Second) {
		select {
		case err := <-r.done:
			r.t.Fatalf("vgpud stopped before it served: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatal("vgpud did not answer on its socket within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.t.Cleanup(r.stop)
}

// runB and stopB are run and stop for benchmarks.
func (r *rig) runB(b *testing.B) {
	b.Helper()
	d, err := New(Options{ConfigPath: r.cfgPath, FS: r.k, StateDir: r.stateDir, SocketPath: r.socket,
		LookupGroup: func(string) (int, error) { return os.Getgid(), nil }, Metrics: metrics.New(nil)})
	if err != nil {
		b.Fatal(err)
	}
	r.d = d
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- d.Run(ctx, nil) }()
	r.c = client.New(r.socket)
	for !r.c.Available(context.Background(), time.Second) {
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *rig) stopB(b *testing.B) {
	r.cancel()
	r.c.Close()
	if err := <-r.done; err != nil {
		b.Error(err)
	}
}

// stop stops the daemon (idempotent) and fails the test on a bad exit.
func (r *rig) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	r.c.Close()
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Errorf("vgpud stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		r.t.Error("vgpud did not stop within 30s")
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
