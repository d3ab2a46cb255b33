package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/internal/simkernel/fusefs"
	"github.com/vgpu-project/vgpu/pkg/client"
)

// bins are the binaries TestMain built: written once before any test.
type bins struct {
	vgpud, vgpuctl, vgpusim string
	repo                    string
}

var built bins

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e/agent: these tests run vgpusim, which mounts FUSE filesystems: they need root (sudo make test)")
		return 1
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e/agent: /dev/fuse is missing (modprobe fuse): %v\n", err)
		return 1
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/agent: find the repository root:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "vgpu-agent-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/agent:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	built = bins{vgpud: filepath.Join(dir, "vgpud"), vgpuctl: filepath.Join(dir, "vgpuctl"), vgpusim: filepath.Join(dir, "vgpusim"), repo: repo}
	for _, b := range []string{built.vgpud, built.vgpuctl, built.vgpusim} {
		if err := build(repo, b); err != nil {
			fmt.Fprintln(os.Stderr, "e2e/agent:", err)
			return 1
		}
	}
	return m.Run()
}

// build compiles ./cmd/<name>, with the race detector when this test
// binary has it, so races in vgpud fail these tests too.
func build(repo, out string) error {
	args := []string{"build", "-o", out}
	if raceEnabled() {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/"+filepath.Base(out))
	cmd := exec.Command("go", args...)
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// lockedBuffer collects a process's output while tests read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is a child process with its output and exit.
type proc struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	done   chan struct{}
	exit   error
	killed bool
}

func spawn(t testing.TB, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(name, args...), out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.Env = append(os.Environ(), env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.exit = p.cmd.Wait(); close(p.done) }()
	return p
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits; it returns the exit code.
func (p *proc) stop(t testing.TB) int {
	t.Helper()
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("%s ignored SIGTERM for 30s; killed it:\n%s", p.cmd.Path, p.out)
		}
	}
	return p.cmd.ProcessState.ExitCode()
}

// kill9 sends SIGKILL without waiting: a process blocked in a held write
// goes only once the write is released.
func (p *proc) kill9(t testing.TB) {
	t.Helper()
	p.killed = true
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill %s: %v", p.cmd.Path, err)
	}
}

func (p *proc) wait(t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30s:\n%s", p.cmd.Path, p.out)
	}
}

// sim is a running vgpusim.
type sim struct {
	t      testing.TB
	host   string
	mnt    string
	ctl    string
	ready  string
	client *fusefs.Client
	p      *proc
}

// host is one machine's lasting state: the simulated host (recreated
// fresh on a reboot), vgpud's state dir, config and socket.
type host struct {
	t        testing.TB
	dir      string
	hostFile string
	sim      *sim
	agent    *proc
	cfg      string
	state    string
	socket   string
	c        *client.Client
	env      []string // extra environment for vgpud
}

// newHost starts vgpusim for examples/hosts/<hostFile> and writes config.
func newHost(t testing.TB, hostFile, config string) *host {
	t.Helper()
	dir, err := os.MkdirTemp("", "vgpu-agent-")
	if err != nil {
		t.Fatal(err)
	}
	h := &host{t: t, dir: dir, hostFile: hostFile, cfg: filepath.Join(dir, "config.yaml"),
		state: filepath.Join(dir, "state"), socket: filepath.Join(dir, "vgpud.sock")}
	h.c = client.New(h.socket)
	t.Cleanup(h.cleanup)
	if err := os.WriteFile(h.cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	h.bootSim()
	return h
}

// bootSim starts a fresh simulated host: every GPU on its boot driver, no
// VFs, no mdevs (a reboot).
func (h *host) bootSim() {
	h.t.Helper()
	s := &sim{t: h.t, host: h.hostFile, mnt: filepath.Join(h.dir, "mnt"), ctl: filepath.Join(h.dir, "ctl.sock"), ready: filepath.Join(h.dir, "ready")}
	s.client = fusefs.NewClient(s.ctl)
	s.p = spawn(h.t, nil, built.vgpusim, "serve", "--host", filepath.Join(built.repo, "examples", "hosts", h.hostFile),
		"--mount", s.mnt, "--control", s.ctl, "--ready-file", s.ready)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(s.ready); err == nil && strings.TrimSpace(string(b)) == s.mnt {
			break
		}
		if !s.p.running() || time.Now().After(deadline) {
			h.t.Fatalf("vgpusim not ready (%v):\n%s", s.p.exit, s.p.out)
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.sim = s
}

func (h *host) stopSim() {
	h.t.Helper()
	if h.sim == nil {
		return
	}
	h.sim.client.Close()
	if code := h.sim.p.stop(h.t); code != 0 {
		h.t.Errorf("vgpusim exited %d:\n%s", code, h.sim.p.out)
	}
	h.sim = nil
}

// startAgent runs vgpud and waits until its socket answers.
func (h *host) startAgent() {
	h.t.Helper()
	h.agent = h.spawnAgent()
	h.waitAgent()
}

func (h *host) spawnAgent() *proc {
	return spawn(h.t, h.env, built.vgpud, "--sysfs-root", h.sim.mnt, "--state-dir", h.state, "--socket", h.socket,
		"--config", h.cfg, "--log-level", "debug", "--log-format", "json")
}

func (h *host) waitAgent() {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !h.c.Available(context.Background(), time.Second) {
		if !h.agent.running() || time.Now().After(deadline) {
			h.t.Fatalf("vgpud did not come up (%v):\n%s", h.agent.exit, h.agent.out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *host) stopAgent() {
	h.t.Helper()
	if h.agent == nil {
		return
	}
	h.c.Close()
	if code := h.agent.stop(h.t); code != 0 && !h.agent.killed {
		h.t.Errorf("vgpud exited %d on SIGTERM:\n%s", code, h.agent.out)
	}
	h.agent = nil
}

func (h *host) cleanup() {
	h.stopAgent()
	if h.sim != nil {
		_, _ = h.sim.client.ClearFaults(context.Background())
	}
	h.stopSim()
	_ = unix.Unmount(filepath.Join(h.dir, "mnt"), unix.MNT_DETACH)
	if h.t.Failed() {
		h.t.Logf("state kept in %s", h.dir)
		return
	}
	_ = os.RemoveAll(h.dir)
}

// waitHeld waits until n writes are held by vgpusim.
func (h *host) waitHeld(n int) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		hs, err := h.sim.client.Holds(context.Background())
		if err != nil {
			h.t.Fatal(err)
		}
		got := 0
		for _, x := range hs {
			got += x.Waiting
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%d writes held after 30s, want %d: %+v\nvgpud:\n%s", got, n, hs, h.agentOut())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *host) agentOut() string {
	if h.agent == nil {
		return ""
	}
	return h.agent.out.String()
}
