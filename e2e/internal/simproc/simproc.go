// Package simproc runs vgpusim as a process for process-level tests
// (e2e/simhost, e2e/agent): build the binaries, serve a simulated host on a
// temp mount, wait until it answers, and stop it, failing the test if it
// leaves a mount or a process behind, even when the test itself failed.
package simproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Build compiles ./cmd/<base name of out> of the repository at repo into out.
func Build(repo, out string, race bool) error {
	args := []string{"build", "-o", out}
	if race {
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
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

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

// Sim is one vgpusim serve process and its files.
type Sim struct {
	Bin  string // the vgpusim binary
	Host string // the host description file
	// Dir holds Mnt, Ctl and Ready; tests may keep their own files there.
	Dir, Mnt, Ctl, Ready string
	Client               *fusefs.Client
	// Out is the current run's stdout and stderr.
	Out *LockedBuffer

	t    testing.TB
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
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
	s.Out = &LockedBuffer{}
	s.done = make(chan struct{})
	s.cmd = exec.Command(s.Bin, "serve", "--host", s.Host, "--mount", s.Mnt, "--control", s.Ctl, "--ready-file", s.Ready)
	s.cmd.Stdout, s.cmd.Stderr = s.Out, s.Out
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start vgpusim: %v", err)
	}
	done := s.done
	go func() { _ = s.cmd.Wait(); close(done) }()
	deadline := time.After(20 * time.Second)
	for {
		if b, err := os.ReadFile(s.Ready); err == nil && strings.TrimSpace(string(b)) == s.Mnt {
			return
		}
		select {
		case <-done:
			s.t.Fatalf("vgpusim exited before it was ready (%v):\n%s", s.cmd.ProcessState, s.Out)
		case <-deadline:
			s.t.Fatalf("vgpusim not ready after 20s:\n%s", s.Out)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Running reports whether the current run is alive.
func (s *Sim) Running() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Pid is the current run's process id.
func (s *Sim) Pid() int { return s.cmd.Process.Pid }

// Stop sends SIGTERM, waits for the exit and returns the exit code. A
// vgpusim that ignores SIGTERM for 20s is made to print its goroutines
// (SIGQUIT), killed, and fails the test.
func (s *Sim) Stop() int {
	s.t.Helper()
	if s.Running() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-s.done:
			case <-time.After(5 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.done
			}
			s.t.Errorf("vgpusim ignored SIGTERM for 20s; killed it:\n%s", s.Out)
		}
	}
	return s.cmd.ProcessState.ExitCode()
}

// Kill9 kills vgpusim as a crash would, leaving its mount behind.
func (s *Sim) Kill9() {
	s.t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		s.t.Fatalf("kill vgpusim: %v", err)
	}
	<-s.done
}

// Killed reports whether the last run ended by SIGKILL.
func (s *Sim) Killed() bool {
	ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

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
		s.t.Errorf("vgpusim left %s mounted", s.Mnt)
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
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, err := done()
		if err != nil {
			s.t.Fatalf("wait for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no %s after 20s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
