package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/e2e/internal/simproc"
	"github.com/vgpu-project/vgpu/pkg/client"
)

// bins are the binaries TestMain built: written once before any test.
type bins struct {
	vgpud, vgpusim, hook string
	// connhold holds connections to vgpud as a member of its socket group
	// (e2e/internal/connhold); it runs as nobody, so its directory is
	// open to all.
	connhold string
	repo     string
}

// vgpudEnv names another vgpud binary to test instead of this tree's (a
// benchmark of an older build, for a "before" figure).
const vgpudEnv = "VGPU_AGENT_VGPUD"

var built bins

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	// With the race detector when this test binary has it, so races in
	// vgpud fail these tests too.
	race := simproc.RaceEnabled()
	b, err := simproc.BuildAll("vgpu-agent-bin-", map[string]bool{"vgpud": race, "vgpusim": race, "vgpu-hook": race})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/agent:", err)
		return 1
	}
	defer os.RemoveAll(b.Dir)
	built = bins{vgpud: b.Path("vgpud"), vgpusim: b.Path("vgpusim"), hook: b.Path("vgpu-hook"),
		connhold: b.Path("connhold"), repo: b.Repo}
	if err := buildConnhold(b.Repo, built.connhold); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/agent:", err)
		return 1
	}
	if other := os.Getenv(vgpudEnv); other != "" {
		built.vgpud = other
	}
	return m.Run()
}

// host is one machine's lasting state: the simulated host (recreated
// fresh on a reboot), vgpud's state dir, config and socket.
type host struct {
	t     testing.TB
	dir   string
	sim   *simproc.Sim
	agent *simproc.Proc
	cfg   string
	state string
	// socket is vgpud's; c talks to it across restarts of vgpud.
	socket string
	c      *client.Client
	env    []string // extra environment for vgpud
	args   []string // extra flags for vgpud
}

// newHost starts vgpusim for examples/hosts/<hostFile> and writes config.
func newHost(t testing.TB, hostFile, config string) *host {
	t.Helper()
	// First, so that its cleanup runs last: vgpud stops before its sysfs.
	sim := simproc.Start(t, built.vgpusim, filepath.Join(built.repo, "examples", "hosts", hostFile))
	// vgpud reaches a held write only once it has started: give it the
	// time. A race build beside the other packages on 2 cores took over
	// 30 s to reach the last write of a carve (CI, once).
	sim.Patience = 2 * time.Minute
	dir, err := os.MkdirTemp("", "vgpu-agent-")
	if err != nil {
		t.Fatal(err)
	}
	h := &host{t: t, dir: dir, sim: sim, cfg: filepath.Join(dir, "config.yaml"),
		state: filepath.Join(dir, "state"), socket: filepath.Join(dir, "vgpud.sock")}
	h.c = client.New(h.socket)
	t.Cleanup(h.cleanup)
	if err := os.WriteFile(h.cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return h
}

// rebootSim stops vgpusim and boots a fresh simulated host on the same
// mount: every GPU on its boot driver, no VFs, no mdevs.
func (h *host) rebootSim() {
	h.t.Helper()
	if code := h.sim.Stop(); code != 0 {
		h.t.Errorf("vgpusim exited %d:\n%s", code, h.sim.Out)
	}
	h.sim.Restart()
}

// startAgent runs vgpud and waits until its socket answers.
func (h *host) startAgent() {
	h.t.Helper()
	h.agent = h.spawnAgent()
	simproc.AwaitVgpud(h.t, h.agent, h.c)
}

func (h *host) spawnAgent() *simproc.Proc {
	h.t.Helper()
	p := simproc.Command(built.vgpud, "--sysfs-root", h.sim.Mnt, "--state-dir", h.state, "--socket", h.socket,
		"--config", h.cfg, "--log-level", "debug", "--log-format", "json",
		// Its domains are API calls, not libvirt's: nothing is collected.
		"--libvirt-uri", "")
	p.Cmd.Args = append(p.Cmd.Args, h.args...)
	p.Cmd.Env = append(os.Environ(), h.env...)
	if err := p.Start(); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *host) stopAgent() {
	h.t.Helper()
	if h.agent == nil {
		return
	}
	simproc.StopVgpud(h.t, h.agent, h.c)
	h.agent = nil
}

// cleanup stops vgpud and lets any held write go; vgpusim's own cleanup
// stops it after.
func (h *host) cleanup() {
	h.stopAgent()
	_, _ = h.sim.Client.ClearFaults(context.Background())
	if h.t.Failed() {
		h.t.Logf("state kept in %s", h.dir)
		return
	}
	_ = os.RemoveAll(h.dir)
}

func (h *host) agentOut() string {
	if h.agent == nil {
		return ""
	}
	return h.agent.Out.String()
}

// buildConnhold builds e2e/internal/connhold, static, into out.
func buildConnhold(repo, out string) error {
	cmd := exec.Command("go", "build", "-o", out, "./e2e/internal/connhold")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./e2e/internal/connhold: %w\n%s", err, b)
	}
	return nil
}
