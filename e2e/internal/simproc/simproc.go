// Package simproc runs the project's binaries as processes for the
// process-level tests (e2e/simhost, e2e/agent, e2e/libvirt): build them,
// serve a simulated host with vgpusim on a temp mount, wait until it
// answers, and stop it, failing the test if it leaves a mount or a process
// behind, even when the test itself failed; start and stop any child (Proc),
// vgpud among them (AwaitVgpud, StopVgpud); and have a child that hangs
// say where, with the vgpusim it waits on (WaitCmd).
package simproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/internal/sim/kernel/fusefs"
	"github.com/vgpu-project/vgpu/internal/syncbuf"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// static reports whether make build builds the binary with CGO_ENABLED=0.
// vgpuctl is left out: the tests' attach and detach run in it, not in an
// exec'd vgpuctl-libvirt.
func static(name string) bool { return name == "vgpud" || name == "vgpu-hook" }

// Build compiles ./cmd/<base name of out> of the repository at repo into
// out, without cgo where make build does so unless race asks for the race
// detector (which needs cgo).
func Build(repo, out string, race bool) error {
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/"+filepath.Base(out))
	cmd := exec.Command("go", args...)
	cmd.Dir = repo
	if static(filepath.Base(out)) && !race {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// Bins is what BuildAll made: the repository root and the temporary
// directory that holds the built binaries.
type Bins struct {
	Repo, Dir string
}

// Path is where BuildAll put the binary of ./cmd/<name>.
func (b Bins) Path(name string) string { return filepath.Join(b.Dir, name) }

// BuildAll prepares a process-level suite's TestMain: it checks the host
// (CheckHost), takes the repository root as two levels above the test's
// directory, and builds ./cmd/<name> for each name, with the race
// detector where race says so, into a new temporary directory open to all
// (0755: QEMU and unprivileged helpers run what it holds). The caller
// removes Dir when the suite ends; on an error nothing is left behind.
func BuildAll(pattern string, race map[string]bool) (Bins, error) {
	if err := CheckHost(); err != nil {
		return Bins{}, err
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		return Bins{}, fmt.Errorf("find the repository root: %w", err)
	}
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return Bins{}, fmt.Errorf("create a directory for the binaries: %w", err)
	}
	b := Bins{Repo: repo, Dir: dir}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return Bins{}, fmt.Errorf("open %s to all: %w", dir, err)
	}
	for name, r := range race {
		if err := Build(repo, b.Path(name), r); err != nil {
			os.RemoveAll(dir)
			return Bins{}, err
		}
	}
	return b, nil
}

// RaceEnabled reports whether the running binary was built with -race.
func RaceEnabled() bool {
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

// CheckHost returns why FUSE tests cannot run here, or nil: they need root
// and /dev/fuse, and fail (rather than skip) without them.
func CheckHost() error {
	if os.Geteuid() != 0 {
		return errors.New("these tests mount FUSE filesystems and need root: run them with sudo (sudo make test)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("/dev/fuse is missing (modprobe fuse, or run scripts/deps.sh): %w", err)
	}
	return nil
}

// LockedBuffer collects a child's output while a test may read it.
type LockedBuffer = syncbuf.Buffer

// Mounted reports whether anything is mounted at dir in this namespace.
func Mounted(dir string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == dir {
			return true, nil
		}
	}
	return false, sc.Err()
}

// Proc is a child process whose output a test reads while it runs.
type Proc struct {
	Cmd *exec.Cmd
	// Out is the process's stdout and stderr.
	Out *LockedBuffer

	done   chan struct{} // closed when the process has exited; nil until Start
	killed bool          // Kill was called
}

// Command prepares name with args, its stdout and stderr going to Out. Set
// Cmd's other fields (Env, SysProcAttr) before Start.
func Command(name string, args ...string) *Proc {
	p := &Proc{Cmd: exec.Command(name, args...), Out: &LockedBuffer{}}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
	return p
}

// Start starts the process, and a goroutine that waits for its exit.
func (p *Proc) Start() error {
	if err := p.Cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Cmd.Args[0], err)
	}
	done := make(chan struct{})
	p.done = done
	go func() { _ = p.Cmd.Wait(); close(done) }()
	return nil
}

// Running reports whether the process has started and not exited.
func (p *Proc) Running() bool {
	if p == nil || p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// exited reports whether the process has started and exited.
func (p *Proc) exited() bool { return p != nil && p.done != nil && !p.Running() }

// Pid is the process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// ExitCode is the exit code once the process has exited; -1 before, or
// when a signal ended it.
func (p *Proc) ExitCode() int {
	if !p.exited() {
		return -1
	}
	return p.Cmd.ProcessState.ExitCode()
}

// State says how the process ended, or that it has not.
func (p *Proc) State() string {
	switch {
	case p == nil || p.done == nil:
		return "not started"
	case !p.exited():
		return "running"
	}
	return p.Cmd.ProcessState.String()
}

func (p *Proc) name() string { return filepath.Base(p.Cmd.Path) }

// Await calls ready every interval until it reports true; it fails if the
// process exits, or timeout passes, first.
func (p *Proc) Await(timeout, interval time.Duration, ready func() bool) error {
	deadline := time.After(timeout)
	for !ready() {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%s)", p.name(), p.State())
		case <-deadline:
			return fmt.Errorf("%s not ready after %v", p.name(), timeout)
		case <-time.After(interval):
		}
	}
	return nil
}

// Stop sends sig and waits up to grace for the exit. A process still
// running then is sent SIGQUIT (a Go program prints its goroutines), given
// 5s more and killed, and Stop says so. A process not running is left alone.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	_ = p.Cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.Cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
	return fmt.Errorf("%s ignored %s for %v; killed it", p.name(), unix.SignalName(sig), grace)
}

// Quit sends SIGQUIT, which makes a Go program print its goroutines on its
// stderr and exit, and waits up to grace for the exit; a process still
// there is killed. Quit counts as Kill.
func (p *Proc) Quit(grace time.Duration) {
	if !p.Running() {
		return
	}
	p.killed = true
	_ = p.Cmd.Process.Signal(syscall.SIGQUIT)
	if p.Wait(grace) != nil {
		_ = p.Cmd.Process.Kill()
		_ = p.Wait(grace)
	}
}

// Kill sends SIGKILL, as a crash would, without waiting: a process blocked
// in a held write (fusefs.Hold) goes only once the write is released.
func (p *Proc) Kill() error {
	p.killed = true
	return p.Cmd.Process.Kill()
}

// Killed reports whether Kill was called.
func (p *Proc) Killed() bool { return p != nil && p.killed }

// Wait waits up to timeout for the process to exit.
func (p *Proc) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %v", p.name(), timeout)
	}
}

// thread is what /proc shows of one thread of a process.
type thread struct {
	tid, state, wchan, stack string
	// ran and waited are the nanoseconds it has spent on a CPU and
	// runnable but waiting for one (schedstat).
	ran, waited int64
}

// threads reads the threads of process pid from /proc (stacks need root).
func threads(pid int) ([]thread, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tids, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read threads of %d: %w", pid, err)
	}
	out := make([]thread, 0, len(tids))
	for _, tid := range tids {
		read := func(name string) string {
			c, err := os.ReadFile(filepath.Join(dir, tid.Name(), name))
			if err != nil {
				return fmt.Sprintf("(%v)", err)
			}
			return strings.TrimSpace(string(c))
		}
		th := thread{tid: tid.Name(), state: "?", wchan: read("wchan"), stack: read("stack")}
		for l := range strings.Lines(read("status")) {
			if v, ok := strings.CutPrefix(l, "State:"); ok { // "S (sleeping)"
				th.state = strings.TrimSpace(v)
			}
		}
		_, _ = fmt.Sscan(read("schedstat"), &th.ran, &th.waited)
		out = append(out, th)
	}
	return out, nil
}

// kernelView tells where each thread of process pid is in the kernel: its
// state (R runnable, S sleeping, D uninterruptible), wait channel, stack,
// and how long it ran and waited for a CPU since before, a reading taken
// since ago. A thread waiting on a FUSE server shows request_wait_answer;
// a FUSE server's idle reader, fuse_dev_do_read; a starved thread, R and
// waiting all along.
func kernelView(pid int, before []thread, since time.Duration) string {
	now, err := threads(pid)
	if err != nil {
		return err.Error() + "\n"
	}
	was := map[string]thread{}
	for _, th := range before {
		was[th.tid] = th
	}
	var b strings.Builder
	for _, th := range now {
		fmt.Fprintf(&b, "thread %s: %s, wchan %s", th.tid, th.state, th.wchan)
		if w, ok := was[th.tid]; ok {
			fmt.Fprintf(&b, "; in the last %v ran %v, waited for a CPU %v", since,
				time.Duration(th.ran-w.ran).Round(time.Millisecond), time.Duration(th.waited-w.waited).Round(time.Millisecond))
		}
		b.WriteString("\n")
		for l := range strings.Lines(th.stack) {
			b.WriteString("    " + l)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// fuseQueued reports whether the FUSE connection that process pid serves
// has requests queued that none of its readers has taken: it polls a
// duplicate of pid's /dev/fuse descriptor, readable exactly then.
func fuseQueued(pid int) (bool, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("list descriptors of %d: %w", pid, err)
	}
	for _, e := range fds {
		if target, _ := os.Readlink(filepath.Join(dir, e.Name())); target != "/dev/fuse" {
			continue
		}
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pidfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			return false, fmt.Errorf("open pidfd of %d: %w", pid, err)
		}
		defer unix.Close(pidfd)
		fd, err := unix.PidfdGetfd(pidfd, n, 0)
		if err != nil {
			return false, fmt.Errorf("duplicate /dev/fuse (fd %d) of %d: %w", n, pid, err)
		}
		defer unix.Close(fd)
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, 0); err != nil {
			return false, fmt.Errorf("poll /dev/fuse of %d: %w", pid, err)
		}
		return pfd[0].Revents&unix.POLLIN != 0, nil
	}
	return false, fmt.Errorf("process %d has no /dev/fuse open", pid)
}

// WaitCmd waits up to limit for cmd (started, not yet waited for) to exit
// and returns Wait's error. A cmd still running then is stuck: before
// WaitCmd ends it, and server, the vgpusim it may wait on (nil: none), it
// has both explain themselves in stuck: their threads in the kernel (read
// before anything is signalled), how long cmd took to exit on SIGQUIT, and
// server's goroutines. SIGQUIT makes a Go cmd print its own goroutines on
// its stderr.
func WaitCmd(cmd *exec.Cmd, limit time.Duration, server *Sim) (stuck string, err error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return "", err
	case <-time.After(limit):
	}
	var b strings.Builder
	name := filepath.Base(cmd.Path)
	serving := server != nil && server.Running()
	// Two readings a second apart tell a starved thread from a sleeping one.
	const watch = time.Second
	cmdBefore, _ := threads(cmd.Process.Pid)
	var simBefore []thread
	if serving {
		simBefore, _ = threads(server.Pid())
	}
	time.Sleep(watch)
	fmt.Fprintf(&b, "%s did not exit within %v; its threads in the kernel:\n%s", name, limit, kernelView(cmd.Process.Pid, cmdBefore, watch))
	if serving {
		fmt.Fprintf(&b, "vgpusim's threads in the kernel:\n%s", kernelView(server.Pid(), simBefore, watch))
		switch queued, err := fuseQueued(server.Pid()); {
		case err != nil:
			fmt.Fprintf(&b, "vgpusim's FUSE queue: %v\n", err)
		case queued:
			b.WriteString("vgpusim's FUSE queue holds requests none of its readers has taken\n")
		default:
			b.WriteString("vgpusim's FUSE queue is empty: it has read every request sent\n")
		}
	}
	_ = cmd.Process.Signal(syscall.SIGQUIT)
	// At exit the kernel drops a FUSE request vgpusim has not read yet;
	// one it has read holds cmd until answered, or until vgpusim is gone.
	quit := time.Now()
	exited := false
	select {
	case err = <-done:
		exited = true
		fmt.Fprintf(&b, "%s exited %v after SIGQUIT\n", name, time.Since(quit).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		fmt.Fprintf(&b, "%s still there 5s after SIGQUIT\n", name)
	}
	if serving {
		server.p.Quit(10 * time.Second)
		fmt.Fprintf(&b, "vgpusim's output, its goroutines last (SIGQUIT):\n%s", server.Out)
	}
	if !exited {
		_ = cmd.Process.Kill()
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			fmt.Fprintf(&b, "%s did not exit on SIGKILL either\n", name)
		}
	}
	return b.String(), err
}

// AwaitVgpud waits until vgpud, running as p, answers on c: up to 2 min,
// as a race build beside the other packages on 2 cores may need (CI once
// saw no answer within 60s). A vgpud that does not answer is sent SIGQUIT,
// so that the failure shows where each of its goroutines waits.
func AwaitVgpud(t testing.TB, p *Proc, c *client.Client) {
	t.Helper()
	up := func() bool { return c.Available(context.Background(), 5*time.Second) }
	if err := p.Await(2*time.Minute, 10*time.Millisecond, up); err != nil {
		if p.Running() {
			_ = p.Cmd.Process.Signal(syscall.SIGQUIT)
			_ = p.Wait(5 * time.Second)
		}
		t.Fatalf("vgpud did not come up: %v:\n%s", err, p.Out)
	}
}

// StopVgpud drops c's connections and stops vgpud, running as p, with
// SIGTERM; it fails the test unless vgpud exits 0 within 30s, or p was
// killed with Kill.
func StopVgpud(t testing.TB, p *Proc, c *client.Client) {
	t.Helper()
	c.Close()
	if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Errorf("%v:\n%s", err, p.Out)
	}
	if code := p.ExitCode(); code != 0 && !p.Killed() {
		t.Errorf("vgpud exited %d on SIGTERM:\n%s", code, p.Out)
	}
}

// Sim is one vgpusim serve process and its files.
type Sim struct {
	Bin  string // the vgpusim binary
	Host string // the host description file
	// Dir holds Mnt, Ctl and Ready; tests may keep their own files there.
	Dir, Mnt, Ctl, Ready string
	Client               *fusefs.Client
	// Out is the current run's stdout and stderr.
	Out *LockedBuffer
	// Patience bounds WaitOpens and WaitHeld: 20s if zero.
	Patience time.Duration

	t testing.TB
	p *Proc // the current run
}

// Start serves host (a file) with the vgpusim binary bin on a fresh temp
// dir and waits until the mount answers. Cleanup stops it.
func Start(t testing.TB, bin, host string) *Sim {
	t.Helper()
	dir := t.TempDir()
	s := &Sim{Bin: bin, Host: host, Dir: dir, Mnt: filepath.Join(dir, "mnt"),
		Ctl: filepath.Join(dir, "ctl.sock"), Ready: filepath.Join(dir, "ready"), t: t}
	s.Client = fusefs.NewClient(s.Ctl)
	t.Cleanup(s.cleanup)
	s.Restart()
	return s
}

// Restart starts vgpusim again on the same directory, after Stop or Kill9:
// a fresh host, as after a reboot.
func (s *Sim) Restart() {
	s.t.Helper()
	if s.Running() {
		s.t.Fatal("vgpusim restarted while running")
	}
	if err := os.Remove(s.Ready); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.t.Fatalf("remove the last run's ready file: %v", err)
	}
	s.Client.Close() // connections to the last run
	// --etc: a reboot keeps the host's /etc (old GIM's saved vf_num).
	s.p = Command(s.Bin, "serve", "--host", s.Host, "--mount", s.Mnt, "--control", s.Ctl, "--ready-file", s.Ready,
		"--etc", filepath.Join(s.Dir, "etc"))
	s.Out = s.p.Out
	if err := s.p.Start(); err != nil {
		s.t.Fatal(err)
	}
	ready := func() bool {
		b, err := os.ReadFile(s.Ready)
		return err == nil && strings.TrimSpace(string(b)) == s.Mnt
	}
	if err := s.p.Await(20*time.Second, 5*time.Millisecond, ready); err != nil {
		s.t.Fatalf("%v:\n%s", err, s.Out)
	}
}

// Running reports whether the current run is alive.
func (s *Sim) Running() bool { return s.p.Running() }

// Pid is the current run's process id.
func (s *Sim) Pid() int { return s.p.Pid() }

// Stop sends SIGTERM, waits for the exit and returns the exit code. A
// vgpusim that ignores SIGTERM for 20s is made to print its goroutines
// (SIGQUIT), killed, and fails the test.
func (s *Sim) Stop() int {
	s.t.Helper()
	if err := s.p.Stop(syscall.SIGTERM, 20*time.Second); err != nil {
		s.t.Errorf("%v:\n%s", err, s.Out)
	}
	return s.p.ExitCode()
}

// Kill9 kills vgpusim as a crash would, leaving its mount behind, and
// waits for it to go.
func (s *Sim) Kill9() {
	s.t.Helper()
	if err := s.p.Kill(); err != nil {
		s.t.Fatalf("kill vgpusim: %v", err)
	}
	<-s.p.done
}

// Killed reports whether Kill9 ended the last run.
func (s *Sim) Killed() bool { return s.p.Killed() }

func (s *Sim) cleanup() {
	s.Client.Close()
	if code := s.Stop(); code != 0 && !s.Killed() {
		s.t.Errorf("vgpusim exited %d on SIGTERM:\n%s", code, s.Out)
	}
	m, err := Mounted(s.Mnt)
	if err != nil {
		s.t.Error(err)
	}
	if m {
		// A killed vgpusim cannot unmount; one that exited should have.
		if !s.Killed() {
			s.t.Errorf("vgpusim left %s mounted", s.Mnt)
		}
		_ = unix.Unmount(s.Mnt, unix.MNT_DETACH)
	}
}

// FS is the mount as the binaries see it (sysfs.NewOS(Mnt)).
func (s *Sim) FS() sysfs.FS { return sysfs.NewOS(s.Mnt) }

// WaitOpens waits until vgpusim counts want open handles on path: FUSE
// delivers a close to vgpusim just after close(2) has returned.
func (s *Sim) WaitOpens(path string, want int) {
	s.t.Helper()
	s.poll(fmt.Sprintf("%d opens of %s", want, path), func() (bool, error) {
		n, err := s.Client.Opens(context.Background(), path)
		return n == want, err
	})
}

// WaitHeld waits until want writes are held (fusefs.Hold) in all.
func (s *Sim) WaitHeld(want int) {
	s.t.Helper()
	s.poll(fmt.Sprintf("%d held writes", want), func() (bool, error) {
		hs, err := s.Client.Holds(context.Background())
		n := 0
		for _, h := range hs {
			n += h.Waiting
		}
		return n == want, err
	})
}

func (s *Sim) poll(what string, done func() (bool, error)) {
	s.t.Helper()
	patience := s.Patience
	if patience == 0 {
		patience = 20 * time.Second
	}
	deadline := time.Now().Add(patience)
	for {
		ok, err := done()
		if err != nil {
			s.t.Fatalf("wait for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no %s after %v", what, patience)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
