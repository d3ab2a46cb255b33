//go:build e2e

// Package lab runs vgpu against a real Linux kernel: a QEMU (TCG) guest
// with Debian 13's kernel 6.12, an emulated IOMMU, two SR-IOV devices (igb,
// NVMe) and the kernel's sample mdev drivers (mtty, mbochs, mdpy). build.sh
// builds the guest (cached outside the repo), run.sh boots it; the tests
// here boot it once per group and run the project's binaries in it. See
// docs/lab.md. A lab that cannot be built or booted fails the tests.
//
//	go test -tags e2e -timeout 30m ./e2e/lab/...     (as root; make e2e)
package lab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	labDir  string // the built lab (build.sh's output)
	binDir  string // the binaries shared into every guest
	repoDir string
)

func TestMain(m *testing.M) {
	code, err := setup()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e/lab: %v\n", err)
		os.Exit(1)
	}
	if code == 0 {
		code = m.Run()
	}
	if binDir != "" {
		os.RemoveAll(filepath.Dir(binDir))
	}
	os.Exit(code)
}

func setup() (int, error) {
	if os.Geteuid() != 0 {
		return 1, fmt.Errorf("the lab needs root (debootstrap, chroot, mounts): run as root")
	}
	_, file, _, _ := runtime.Caller(0)
	here := filepath.Dir(file)
	repoDir = filepath.Join(here, "..", "..")

	t0 := time.Now()
	// Separate buffers: os/exec copies stdout and stderr in two goroutines,
	// and one buffer for both interleaves them mid-line.
	var out, msgs bytes.Buffer
	cmd := exec.Command(filepath.Join(here, "build.sh"))
	cmd.Stdout, cmd.Stderr = &out, io.MultiWriter(&msgs, os.Stderr)
	if err := cmd.Run(); err != nil {
		return 1, fmt.Errorf("building the lab failed: %w\n%s", err, msgs.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	labDir = lines[len(lines)-1]
	if _, err := os.Stat(filepath.Join(labDir, "done")); err != nil {
		return 1, fmt.Errorf("build.sh printed %q, which is not a built lab: %w", labDir, err)
	}
	fmt.Fprintf(os.Stderr, "e2e/lab: lab %s ready in %s\n", labDir, time.Since(t0).Round(time.Second))

	t0 = time.Now()
	tmp, err := os.MkdirTemp("", "vgpu-lab-bin-")
	if err != nil {
		return 1, err
	}
	binDir = filepath.Join(tmp, "bin")
	if err := buildBinaries(binDir); err != nil {
		return 1, err
	}
	fmt.Fprintf(os.Stderr, "e2e/lab: binaries built in %s\n", time.Since(t0).Round(time.Second))
	return 0, nil
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// buildBinaries builds what the guest runs, as make build does: vgpuctl is
// static and execs vgpuctl-libvirt (cgo) for attach and detach; built here
// against Debian 12's libvirt, that runs on the guest's libvirt 11 (same
// soname, versioned symbols). vgpu-nvml, which loads NVML, is cgo too; the
// rest is static.
func buildBinaries(dir string) error {
	builds := []struct {
		args []string
		cgo  bool
	}{
		{[]string{"build", "-o", filepath.Join(dir, "vgpuctl"), "./cmd/vgpuctl"}, false},
		{[]string{"build", "-o", filepath.Join(dir, "vgpuctl-libvirt"), "./cmd/vgpuctl"}, true},
		{[]string{"build", "-o", filepath.Join(dir, "vgpud"), "./cmd/vgpud"}, false},
		// A newer build, for the in-place upgrade of a running vgpud.
		{[]string{"build", "-ldflags", "-X github.com/vgpu-project/vgpu/pkg/version.Version=lab-upgrade",
			"-o", filepath.Join(dir, "vgpud.next"), "./cmd/vgpud"}, false},
		{[]string{"build", "-o", filepath.Join(dir, "vgpu-nvml"), "./cmd/vgpu-nvml"}, true},
		{[]string{"build", "-o", filepath.Join(dir, "vgpu-hook"), "./cmd/vgpu-hook"}, false},
		{[]string{"build", "-o", filepath.Join(dir, "go-hello"), "./e2e/lab/gohello"}, false}, // BenchmarkLab's floor
		{[]string{"test", "-c", "-tags", "labguest", "-o", filepath.Join(dir, "guest.test"), "./e2e/lab/guest"}, false},
	}
	for _, b := range builds {
		cmd := exec.Command(goTool(), b.args...)
		cmd.Dir = repoDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b.cgo {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(b.args, " "), err, out)
		}
	}
	return nil
}

// boot is one run of the guest.
type boot struct {
	share   string // /lab in the guest
	status  int    // the script's exit status; -1 when the guest did not finish
	console string // the guest's serial console
	log     string // the script's output (out/run.log)
}

// bootGuest boots the lab with script as /lab/run and waits for it to power
// off. The share holds the binaries (bin/), the test catalog (profiles/)
// and the results (out/).
func bootGuest(t *testing.T, script string) boot {
	t.Helper()
	return bootShare(t, newShare(t), script)
}

// newShare makes a share with the binaries and the test catalog; boots
// that share one keep its files (the lab's disk across a reboot).
func newShare(t testing.TB) string {
	t.Helper()
	share := t.TempDir()
	if err := os.CopyFS(filepath.Join(share, "bin"), os.DirFS(binDir)); err != nil {
		t.Fatalf("copy the binaries into the share: %v", err)
	}
	if err := os.CopyFS(filepath.Join(share, "profiles"), os.DirFS(filepath.Join(repoDir, "e2e", "lab", "profiles"))); err != nil {
		t.Fatalf("copy the test catalog into the share: %v", err)
	}
	// What make install puts in /etc/modules-load.d.
	if err := os.CopyFS(filepath.Join(share, "modules-load.d"), os.DirFS(filepath.Join(repoDir, "systemd", "modules-load.d"))); err != nil {
		t.Fatalf("copy the modules-load.d file into the share: %v", err)
	}
	// The unit, whose capability bounding set TestVgpudCapabilities applies.
	unit, err := os.ReadFile(filepath.Join(repoDir, "systemd", "vgpud.service"))
	if err == nil {
		err = os.WriteFile(filepath.Join(share, "vgpud.service"), unit, 0o644)
	}
	if err != nil {
		t.Fatalf("copy the systemd unit into the share: %v", err)
	}
	for _, f := range []string{"bin/vgpuctl", "bin/vgpuctl-libvirt", "bin/vgpud", "bin/vgpud.next", "bin/vgpu-hook", "bin/vgpu-nvml", "bin/go-hello", "bin/guest.test"} {
		if err := os.Chmod(filepath.Join(share, f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return share
}

// bootShare boots the guest on share with script as /lab/run. A guest whose
// emulated CPU stops taking timer interrupts (TCG, now and then: the kernel
// reports RCU stalls and nothing more happens) is stopped and booted once
// more on the same share; a second stall fails the test.
func bootShare(t testing.TB, share, script string, env ...string) boot {
	t.Helper()
	if err := os.WriteFile(filepath.Join(share, "run"), []byte("#!/bin/bash\nset -u\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, stalled := runGuest(t, share, env...)
	if b.status < 0 && stalled {
		t.Logf("the emulated guest stalled (RCU stall reports, no progress); booting it once more:\n%s", tail(b.console, 12))
		if err := os.RemoveAll(filepath.Join(share, "out")); err != nil {
			t.Fatal(err)
		}
		b, _ = runGuest(t, share, env...)
	}
	if b.status < 0 {
		t.Fatalf("the lab guest did not finish its script; console:\n%s", tail(b.console, 80))
	}
	return b
}

// stallReports is how many RCU stall reports mean the guest is stuck: the
// kernel repeats one about every minute while a CPU makes no progress.
const stallReports = 3

// runGuest runs run.sh on share once, with env added to its environment.
// stalled says the guest was stopped because its console showed
// stallReports RCU stall reports.
func runGuest(t testing.TB, share string, env ...string) (b boot, stalled bool) {
	t.Helper()
	// run.sh's own limit (VGPU_LAB_TIMEOUT, 900 s unless env sets it) and a
	// minute for it to stop the guest.
	limit := 15 * time.Minute
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "VGPU_LAB_TIMEOUT="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				limit = time.Duration(n)*time.Second + time.Minute
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repoDir, "e2e", "lab", "run.sh"), share)
	cmd.Env = append(append(os.Environ(), "VGPU_LAB_DIR="+labDir), env...)
	console := &stallWatch{limit: stallReports, stuck: cancel}
	cmd.Stdout, cmd.Stderr = console, console
	t0 := time.Now()
	err := cmd.Run()
	b = boot{share: share, status: -1, console: console.String()}
	if log, rerr := os.ReadFile(filepath.Join(share, "out", "run.log")); rerr == nil {
		b.log = string(log)
	}
	if st, rerr := os.ReadFile(filepath.Join(share, "out", "status")); rerr == nil {
		fmt.Sscan(string(st), &b.status)
	}
	t.Logf("guest ran %s: exit %d, run.sh: %v", time.Since(t0).Round(100*time.Millisecond), b.status, err)
	return b, console.tripped()
}

// stallWatch collects the guest's console and calls stuck once it has seen
// limit RCU stall reports.
type stallWatch struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	limit   int
	stuck   func()
	stopped bool
}

const stallSignature = "rcu_preempt detected stalls"

func (w *stallWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if !w.stopped && bytes.Count(w.buf.Bytes(), []byte(stallSignature)) >= w.limit {
		w.stopped = true
		w.stuck()
	}
	return n, err
}

func (w *stallWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func (w *stallWatch) tripped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopped
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// guestTests boots the guest, runs the guest test binary with -test.run
// pattern and turns each top-level guest test into a subtest here, failing
// with its output. A guest test that skips fails: the lab has everything.
func guestTests(t *testing.T, pattern string) boot {
	t.Helper()
	return guestTestsOn(t, newShare(t), pattern)
}

// guestTestsOn is guestTests on a given share, with env added to run.sh's.
// VGPU_LAB_GUEST_TIMEOUT in env is the guest test binary's -test.timeout
// (10m unless set).
func guestTestsOn(t *testing.T, share, pattern string, env ...string) boot {
	t.Helper()
	timeout := "10m"
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "VGPU_LAB_GUEST_TIMEOUT="); ok {
			timeout = v
		}
	}
	b := bootShare(t, share, "guest.test -test.v -test.timeout "+timeout+" -test.run '"+pattern+"'", env...)
	type result struct {
		verdict string
		out     []string
	}
	var order []string
	results := map[string]*result{}
	var cur *result
	sc := bufio.NewScanner(strings.NewReader(b.log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "=== RUN   "); ok && !strings.Contains(name, "/") {
			cur = &result{}
			results[name] = cur
			order = append(order, name)
		}
		for _, v := range []string{"PASS", "FAIL", "SKIP"} {
			if name, ok := strings.CutPrefix(line, "--- "+v+": "); ok {
				name = strings.Fields(name)[0]
				if r, ok := results[name]; ok {
					r.verdict = v
				}
			}
		}
		if cur != nil {
			cur.out = append(cur.out, line)
		}
	}
	if len(order) == 0 {
		t.Fatalf("no guest test matched %q (exit %d); output:\n%s\nconsole:\n%s", pattern, b.status, b.log, tail(b.console, 40))
	}
	for _, name := range order {
		r := results[name]
		t.Run(name, func(t *testing.T) {
			switch r.verdict {
			case "PASS":
				if os.Getenv("VGPU_LAB_VERBOSE") == "1" {
					t.Logf("passed in the guest:\n%s", strings.Join(r.out, "\n"))
				}
			case "SKIP":
				t.Errorf("skipped in the guest; lab tests must not skip:\n%s", strings.Join(r.out, "\n"))
			case "FAIL":
				t.Errorf("failed in the guest:\n%s", strings.Join(r.out, "\n"))
			default:
				t.Errorf("no verdict (the guest binary crashed or timed out?):\n%s\nconsole:\n%s",
					strings.Join(r.out, "\n"), tail(b.console, 40))
			}
		})
	}
	if b.status != 0 && !t.Failed() {
		t.Errorf("guest test binary exited %d with no failing test:\n%s", b.status, tail(b.log, 40))
	}
	return b
}
