package simhost

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/e2e/internal/simproc"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
)

// GPUs of examples/hosts/mixed.yaml.
const (
	mi25 = "0000:03:00.0"
	t4   = "0000:3b:00.0"
	l40s = "0000:86:00.0"
	gvtg = "0000:00:02.0"
)

// sim is one running vgpusim serve, with a state dir for vgpuctl.
type sim struct {
	*simproc.Sim
	t     testing.TB
	state string
}

// startSim serves examples/hosts/<host> on a fresh temp dir and waits until
// the mount answers. Cleanup stops it and fails the test if it leaves a
// mount or a process behind, even when the test itself failed.
func startSim(t testing.TB, host string) *sim {
	t.Helper()
	return startSimAt(t, filepath.Join(built.repo, "examples", "hosts", host))
}

// startSimAt is startSim of the host file at path.
func startSimAt(t testing.TB, path string) *sim {
	t.Helper()
	s := simproc.Start(t, built.vgpusim, path)
	return &sim{Sim: s, t: t, state: filepath.Join(s.Dir, "state")}
}

// mounted reports whether anything is mounted at dir in this namespace.
func mounted(t testing.TB, dir string) bool {
	t.Helper()
	m, err := simproc.Mounted(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// snapshot is everything the host shows.
func (s *sim) snapshot() map[string]string {
	s.t.Helper()
	snap, err := sysfstest.Snapshot(s.FS())
	if err != nil {
		s.t.Fatalf("snapshot %s: %v", s.Mnt, err)
	}
	return snap
}

// result is one vgpuctl run.
type result struct {
	args           []string
	code           int
	stdout, stderr string
}

// vgpuctl runs the real binary against the mount.
func (s *sim) vgpuctl(args ...string) result {
	s.t.Helper()
	return s.vgpuctlCmd(args...).run(s.t)
}

// runLimit bounds one run of vgpuctl (from its start) or of runBinary.
const runLimit = 60 * time.Second

type ctlCmd struct {
	cmd            *exec.Cmd
	args           []string
	stdout, stderr *simproc.LockedBuffer
	sim            *simproc.Sim // the host it runs against
	deadline       time.Time    // set by start
}

// vgpuctlCmd prepares a run, for tests that start several at once. No
// vgpud answers on its socket: without --socket, a vgpud of the machine's
// own would take the carves.
func (s *sim) vgpuctlCmd(args ...string) *ctlCmd {
	full := append([]string{"--sysfs-root", s.Mnt, "--state-dir", s.state,
		"--socket", filepath.Join(s.Dir, "no-vgpud.sock")}, args...)
	c := &ctlCmd{cmd: exec.Command(built.vgpuctl, full...), args: args,
		stdout: &simproc.LockedBuffer{}, stderr: &simproc.LockedBuffer{}, sim: s.Sim}
	c.cmd.Stdout, c.cmd.Stderr = c.stdout, c.stderr
	return c
}

func (c *ctlCmd) start(t testing.TB) {
	t.Helper()
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start vgpuctl %s: %v", strings.Join(c.args, " "), err)
	}
	c.deadline = time.Now().Add(runLimit)
}

// wait fails the test when vgpuctl runs past its limit, with where it and
// vgpusim hang (simproc.WaitCmd).
func (c *ctlCmd) wait(t testing.TB) result {
	t.Helper()
	stuck, err := simproc.WaitCmd(c.cmd, time.Until(c.deadline), c.sim)
	if stuck != "" {
		t.Fatalf("vgpuctl %s: %s\nstdout:\n%s\nstderr, its goroutines last:\n%s",
			strings.Join(c.args, " "), stuck, c.stdout, c.stderr)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("vgpuctl %s: %v", strings.Join(c.args, " "), err)
	}
	return result{args: c.args, code: c.cmd.ProcessState.ExitCode(), stdout: c.stdout.String(), stderr: c.stderr.String()}
}

func (c *ctlCmd) run(t testing.TB) result {
	t.Helper()
	c.start(t)
	return c.wait(t)
}

// ok fails the test unless vgpuctl exited 0.
func (r result) ok(t testing.TB) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("vgpuctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// decode parses vgpuctl's JSON output.
func (r result) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("vgpuctl %s: output is not the JSON expected (%v):\n%s", strings.Join(r.args, " "), err, r.stdout)
	}
}

func diffSnapshots(t testing.TB, what string, before, after map[string]string) {
	t.Helper()
	if d := sysfstest.Diff(before, after); d != "" {
		t.Fatalf("%s changed the host:\n%s", what, d)
	}
}

// runBinary runs a command to completion (runLimit at most); a non-zero
// exit is a result, not an error. server is the vgpusim it may wait on
// (nil: none), made to explain itself with the command if it hangs.
func runBinary(server *simproc.Sim, name string, args ...string) (result, error) {
	var stdout, stderr simproc.LockedBuffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return result{}, fmt.Errorf("run %s %s: %w", name, strings.Join(args, " "), err)
	}
	stuck, err := simproc.WaitCmd(cmd, runLimit, server)
	if stuck != "" {
		return result{}, fmt.Errorf("run %s %s: %s\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), stuck, &stdout, &stderr)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return result{}, fmt.Errorf("run %s %s: %w", name, strings.Join(args, " "), err)
	}
	return result{args: args, code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}, nil
}
