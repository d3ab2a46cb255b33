package deviceplugin_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/syncbuf"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/client/clienttest"
	"github.com/vgpu-project/vgpu/pkg/daemon"
	"github.com/vgpu-project/vgpu/pkg/deviceplugin"
	"github.com/vgpu-project/vgpu/pkg/deviceplugin/kubelettest"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
)

// patience bounds every wait for something that must happen: a liveness
// bound on a loaded machine, not a timing assertion (those are in
// BenchmarkCarveToListAndWatch).
const patience = kubelettest.DefaultPatience

// node is vgpud in process on the fake kernel, serving the fake kubelet.
type node struct {
	t       testing.TB
	k       *simkernel.Kernel
	kube    *kubelettest.Kubelet
	dir     string
	cfgPath string
	gpus    string // the config's gpus section
	extra   string // more of the config (kubernetes keys)
	c       *client.Client
	log     *syncbuf.Buffer
	events  chan struct{}
	grace   time.Duration
	every   time.Duration
	mig     nvstate.Manager // vgpud's NVML for MIG (nil: its default)
	// plugin makes vgpud's device plugin (nil: deviceplugin.ForDaemon).
	plugin func(engine.PluginOptions) (engine.Runner, error)

	d   *daemon.Daemon
	srv *clienttest.Server
}

const domain = "vgpu.example.org"

// newNode makes a node on examples/hosts/<hostFile> whose config has
// gpus (YAML of the gpus list) and the device plugin on; run starts it.
func newNode(t testing.TB, hostFile, gpus string) *node {
	t.Helper()
	return newNodeOn(t, simkernel.NewExample(t, hostFile), gpus)
}

// newNodeFor is newNode on a kernel of the host h.
func newNodeFor(t testing.TB, h simkernel.Host, gpus string) *node {
	t.Helper()
	k, err := simkernel.New(h)
	if err != nil {
		t.Fatal(err)
	}
	return newNodeOn(t, k, gpus)
}

func newNodeOn(t testing.TB, k *simkernel.Kernel, gpus string) *node {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := &node{t: t, k: k, dir: dir, cfgPath: filepath.Join(dir, "config.yaml"), gpus: gpus, log: &syncbuf.Buffer{},
		events: make(chan struct{}, 1), grace: time.Hour, every: 20 * time.Millisecond}
	n.kube = kubelettest.New(t, filepath.Join(dir, "dp"), filepath.Join(dir, "podres.sock"))
	t.Cleanup(func() {
		if t.Failed() && !testing.Verbose() {
			t.Logf("vgpud's log:\n%s", n.log.String())
		}
	})
	return n
}

func (n *node) config() string {
	return "version: v1\ngpus:\n" + n.gpus + "kubernetes:\n  device-plugin: true\n  resource-domain: " + domain +
		"\n  device-plugin-dir: " + n.kube.Dir() + "\n  pod-resources-socket: " + n.kube.PodSocket() + "\n" + n.extra
}

func (n *node) run() {
	n.t.Helper()
	if err := engine.WriteConfig(n.cfgPath, []byte(n.config())); err != nil {
		n.t.Fatal(err)
	}
	var w io.Writer = n.log
	if testing.Verbose() {
		w = io.MultiWriter(n.log, os.Stderr)
	}
	socket := filepath.Join(n.dir, "vgpud.sock")
	plugin := n.plugin
	if plugin == nil {
		plugin = deviceplugin.ForDaemon
	}
	d, err := daemon.New(daemon.Options{ConfigPath: n.cfgPath, FS: n.k, StateDir: filepath.Join(n.dir, "state"), SocketPath: socket,
		Logger:       slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})),
		LookupGroup:  func(string) (int, error) { return os.Getgid(), nil },
		CollectGrace: n.grace, PodResourcesEvery: n.every, KernelEvents: n.events, MIG: n.mig,
		DevicePlugin: plugin})
	if err != nil {
		n.t.Fatal(err)
	}
	n.d = d
	n.c = client.New(socket)
	n.srv = clienttest.Serve(n.t, n.c, func(ctx context.Context) error { return d.Run(ctx, nil) })
}

// start starts the kubelet, then vgpud.
func (n *node) start() {
	n.t.Helper()
	n.kube.Start()
	n.run()
}

// startMixed is a started node on the mixed host, its config mixedGPUs.
func startMixed(t testing.TB) *node {
	t.Helper()
	n := newNode(t, "mixed.yaml", mixedGPUs)
	n.start()
	return n
}

// listed lists the vGPUs of profile through vgpud's API and waits until
// the kubelet lists them all, healthy, under the profile's resource.
func (n *node) listed(profile string) []api.VGPU {
	n.t.Helper()
	vs := n.vgpusOf(profile)
	n.kube.WaitList(domain+"/"+profile, "listed", kubelettest.AllHealthy(ids(vs)))
	return vs
}

// stop stops vgpud (idempotent) and fails the test on a bad exit.
func (n *node) stop() {
	if n.srv != nil {
		n.srv.Stop()
	}
}

// openIntents stops vgpud and reads its ledger's open intents: none is
// left by a change that finished or undid itself.
func (n *node) openIntents() []ledger.Intent {
	n.t.Helper()
	n.stop()
	l, err := ledger.Open(filepath.Join(n.dir, "state", "ledger.db"), ledger.WithReadOnly())
	if err != nil {
		n.t.Fatal(err)
	}
	defer l.Close()
	open, err := l.OpenIntents()
	if err != nil {
		n.t.Fatal(err)
	}
	return open
}

func (n *node) restart() {
	n.t.Helper()
	n.stop()
	n.run()
}

// kernelChanged is the kernel's uevent after a change made behind vgpud's
// back, as pkg/uevent hears it on a real host.
func (n *node) kernelChanged() {
	select {
	case n.events <- struct{}{}:
	default:
	}
}

// allocations reads the ledger through vgpud's API.
func (n *node) allocations() []ledgerView {
	n.t.Helper()
	h, err := n.c.Allocations(context.Background())
	if err != nil {
		n.t.Fatal(err)
	}
	out := make([]ledgerView, len(h.Allocations))
	for i, a := range h.Allocations {
		out[i] = ledgerView{VGPU: a.VGPU, State: a.State, Domain: a.DomainName, Claim: a.DomainUUID}
		if a.Pod != nil {
			out[i].Pod = ledger.Pod{Resource: a.Pod.Resource, Namespace: a.Pod.Namespace, Name: a.Pod.Name, Container: a.Pod.Container}
		}
	}
	return out
}

type ledgerView struct {
	VGPU, State, Domain, Claim string
	Pod                        ledger.Pod
}

// until waits until cond holds, for patience at most; past it the test
// fails with failure's message, made then.
func (n *node) until(cond func() bool, failure func() string) {
	n.t.Helper()
	for deadline := time.Now().Add(patience); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			n.t.Fatal(failure())
		}
	}
}

// waitLog waits until vgpud logged a line containing s.
func (n *node) waitLog(s string) {
	n.t.Helper()
	n.until(func() bool { return strings.Contains(n.log.String(), s) }, func() string {
		return fmt.Sprintf("vgpud did not log %q within %s; log:\n%s", s, patience, n.log.String())
	})
}

// eachLogged waits until vgpud logged, for each of the three resources,
// nth lines that contain any of texts; what names the wait for a failure.
func (n *node) eachLogged(nth int, what string, texts ...string) {
	n.t.Helper()
	for _, r := range []string{resT4, resMI25, resL40S} {
		n.until(func() bool {
			c := 0
			for _, s := range texts {
				c += n.logLines(s, r)
			}
			return c >= nth
		}, func() string {
			return fmt.Sprintf("vgpud did not %s for %s within %s:\n%s", what, r, patience, n.log.String())
		})
	}
}

// logLines counts vgpud's log lines containing each of parts.
func (n *node) logLines(parts ...string) int {
	c := 0
	for _, l := range strings.Split(n.log.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			c++
		}
	}
	return c
}

// logCount counts vgpud's log lines containing s.
func (n *node) logCount(s string) int { return strings.Count(n.log.String(), s) }
