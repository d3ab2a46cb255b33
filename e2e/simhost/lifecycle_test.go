package simhost

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSIGTERMUnmountsCleanly(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	s.vgpuctl("carve", mi25, "--profile", "mi25-4g").ok(t)
	if code := s.Stop(); code != 0 {
		t.Fatalf("vgpusim exited %d on SIGTERM:\n%s", code, s.Out)
	}
	if mounted(t, s.Mnt) {
		t.Fatalf("%s still mounted after SIGTERM", s.Mnt)
	}
	for _, p := range []string{s.Ready, s.Ctl} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
	if out := s.Out.String(); !strings.Contains(out, "unmounting "+s.Mnt) || strings.Contains(out, "detached") {
		t.Errorf("vgpusim's account of the stop:\n%s", out)
	}
}

// TestSIGTERMWhileInUse: a file open under the mount keeps the kernel
// from unmounting; vgpusim detaches the mount, says so, and exits 0.
func TestSIGTERMWhileInUse(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	f, err := os.Open(filepath.Join(s.Mnt, "sys/bus/pci/devices", mi25, "vendor"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if code := s.Stop(); code != 0 {
		t.Fatalf("vgpusim exited %d on SIGTERM:\n%s", code, s.Out)
	}
	if mounted(t, s.Mnt) {
		t.Fatalf("%s still in the mount table after SIGTERM", s.Mnt)
	}
	if !strings.Contains(s.Out.String(), "detached") {
		t.Errorf("vgpusim did not say it detached a busy mount:\n%s", s.Out)
	}
}

// TestStaleMountRecovery: a vgpusim killed with SIGKILL leaves a dead
// mount (ENOTCONN); the next one on the same directory clears it, says
// so, and serves a fresh host.
func TestStaleMountRecovery(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	s.vgpuctl("carve", mi25, "--profile", "mi25-4g").ok(t)
	s.Kill9()
	if _, err := os.Stat(s.Mnt); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("stat of the dead mount: %v, want ENOTCONN", err)
	}
	if !mounted(t, s.Mnt) {
		t.Fatal("the killed vgpusim's mount vanished by itself; nothing to recover")
	}
	s.Restart()
	if !strings.Contains(s.Out.String(), "stale mount") {
		t.Errorf("vgpusim did not report the stale mount it cleared:\n%s", s.Out)
	}
	// A new host: as after a reboot, no VFs.
	if n := len(s.vgpusOf(t, mi25)); n != 0 {
		t.Fatalf("%d vGPUs on the restarted host, want 0", n)
	}
	s.vgpuctl("carve", mi25, "--profile", "mi25-4g").ok(t)
}

// TestSecondServerRefused: a live vgpusim's mount is not taken over.
func TestSecondServerRefused(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	other := filepath.Join(t.TempDir(), "ctl.sock")
	r, err := runBinary(s.Sim, built.vgpusim, "serve", "--host", filepath.Join(built.repo, "examples/hosts/t4.yaml"),
		"--mount", s.Mnt, "--control", other)
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 1 || !strings.Contains(r.stderr, "already served by a live") {
		t.Fatalf("second vgpusim on a live mount: exit %d\n%s", r.code, r.stderr)
	}
	s.vgpuctl("gpus").ok(t)
}

// TestSIGTERMWithMountCopiedElsewhere: a mount namespace created while
// vgpusim runs (unshare here; a systemd service with PrivateTmp on a real
// host) holds a copy of the mount, which keeps the FUSE connection alive
// after vgpusim unmounts its own. vgpusim must exit anyway, promptly.
func TestSIGTERMWithMountCopiedElsewhere(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatalf("start a process in a new mount namespace: %v", err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Until unshare(2) has run, the process sees this namespace.
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", holder.Process.Pid))
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", holder.Process.Pid))
		if ns != "" && ns != self && strings.Contains(string(b), " "+s.Mnt+" ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new mount namespace never showed a copy of the mount")
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	if code := s.Stop(); code != 0 {
		t.Fatalf("vgpusim exited %d on SIGTERM:\n%s", code, s.Out)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("vgpusim took %v to stop", d)
	}
	if mounted(t, s.Mnt) {
		t.Fatalf("%s still mounted here after SIGTERM", s.Mnt)
	}
}
