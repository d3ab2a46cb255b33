package simhost

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/e2e/internal/simproc"
)

// checkBin is a directory with vgpuctl and a vgpud, as the real-host check
// takes binaries built elsewhere.
func checkBin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := simproc.Build(built.repo, filepath.Join(dir, "vgpud"), false); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(built.vgpuctl, filepath.Join(dir, "vgpuctl")); err != nil {
		t.Fatal(err)
	}
	return dir
}

type scriptRun struct {
	code           int
	stdout, stderr string
}

// runCheck runs scripts/real-host-check.sh on the simulated host with
// TMPDIR in tmp, bounded by runLimit times five (it runs vgpuctl some fifty
// times).
func runCheck(t *testing.T, s *sim, bin, tmp string, args ...string) scriptRun {
	t.Helper()
	full := append([]string{"--bin", bin, "--sysfs-root", s.Mnt}, args...)
	cmd := exec.Command(filepath.Join(built.repo, "scripts", "real-host-check.sh"), full...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stuck, err := simproc.WaitCmd(cmd, 5*runLimit, s.Sim)
	if stuck != "" {
		t.Fatalf("real-host-check.sh: %s\nstdout:\n%s\nstderr:\n%s", stuck, &stdout, &stderr)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return scriptRun{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// report fails the test unless the check exited code and its report has
// every line of want.
func (r scriptRun) report(t *testing.T, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("the report lacks %q", w)
		}
	}
	if t.Failed() {
		t.Fatalf("report:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
}

// TestRealHostCheck runs the real-host check as on a GPU host, on the
// simulated NVIDIA vGPU host, with no nvidia-smi to time against: every
// check passes (passthrough warns while the build lacks it), the report
// names every GPU, dry-run and vgpud answer, the host is as it was and the
// script leaves nothing in its temp dir.
func TestRealHostCheck(t *testing.T) {
	s := startSim(t, "nvidia-nvml.yaml")
	bin := checkBin(t)
	tmp := t.TempDir()
	boot := s.snapshot()
	start := time.Now()
	r := runCheck(t, s, bin, tmp, "--nvidia-smi", "", "--runs", "2")
	t.Logf("the check took %s", time.Since(start).Round(time.Millisecond))
	r.report(t, 0,
		"| vgpuctl gpus | PASS |",
		"| vgpuctl gpus -o json | PASS | 3 GPUs |",
		"| profiles --gpu 0000:86:00.0 | PASS |",
		"| profiles --gpu 0000:ca:00.0 | PASS |",
		"| profiles --gpu 0000:cb:00.0 | PASS |",
		"| carve 0000:86:00.0 --profile l40s-12q --dry-run | PASS | a plan |",
		"| carve 0000:ca:00.0 --profile a100-1-5c --dry-run | PASS | a plan |",
		"| carve 0000:cb:00.0 --profile h100-1-10c --dry-run | PASS | a plan |",
		"| carve 0000:cb:00.0 --profile passthrough --dry-run |",
		"| vgpuctl vgpus | PASS |",
		"| vgpuctl vgpus through vgpud | PASS |",
		"| vgpud GET /v1/gpus | PASS | HTTP 200",
		"| vgpud GET /v1/vgpus | PASS | HTTP 200",
		"| vgpud stops cleanly | PASS |",
		"| vgpuctl gpus <= 1.0x nvidia-smi -L | SKIP | no nvidia-smi |",
		"| `vgpuctl gpus` |",
		"| `vgpuctl --version` |",
		", 0 failed,",
	)
	diffSnapshots(t, "the real-host check", boot, s.snapshot())
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the check left %d entries in its TMPDIR: %v", len(left), left)
	}
}

// TestRealHostCheckH200Guest runs the real-host check on the shape of the
// real H200 host (examples/hosts/h200-guest.yaml: a VM without a vIOMMU,
// the datacenter driver, the measured H200's NVML): nothing can be carved
// there, so every dry-run carve (the catalog's H200 SXM profiles and
// passthrough) is a refusal in one line, and with the listings and vgpud
// every check passes, none warns, and the host is as it was.
func TestRealHostCheckH200Guest(t *testing.T) {
	s := startSim(t, "h200-guest.yaml")
	bin := checkBin(t)
	boot := s.snapshot()
	r := runCheck(t, s, bin, t.TempDir(), "--nvidia-smi", "", "--runs", "2")
	const gpu = "0000:00:06.0"
	r.report(t, 0,
		"| vgpuctl gpus | PASS |",
		"| vgpuctl gpus -o json | PASS | 1 GPUs |",
		"| profiles --gpu "+gpu+" | PASS |",
		"| carve "+gpu+" --profile h200x-1-18c --dry-run | PASS | refused in one line (exit 2) |",
		"| carve "+gpu+" --profile h200x-141c --dry-run | PASS | refused in one line (exit 2) |",
		"| carve "+gpu+" --profile passthrough --dry-run | PASS | refused in one line (exit 2) |",
		"| vgpuctl vgpus | PASS |",
		"| vgpuctl vgpus through vgpud | PASS |",
		"| vgpud GET /v1/gpus | PASS | HTTP 200",
		"| vgpud GET /v1/vgpus | PASS | HTTP 200",
		"| vgpud stops cleanly | PASS |",
		", 0 failed, 0 warnings",
	)
	carves := 0
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "| carve "+gpu+" ") {
			carves++
			if !strings.Contains(l, "| PASS | refused in one line (exit 2) |") {
				t.Errorf("a dry-run carve on the H200 guest that is no refusal in one line: %s", l)
			}
		}
	}
	if carves < 11 { // 5 time-sliced, 5 MIG-backed, passthrough
		t.Errorf("%d dry-run carves, want the H200 SXM's 10 profiles and passthrough\n%s", carves, r.stdout)
	}
	diffSnapshots(t, "the real-host check", boot, s.snapshot())
}

// TestRealHostCheckFails: a listing that shows an empty profiles table
// without a reason, and a dry-run that errors instead of refusing, each
// fail the check (exit 1) with a line naming them; the rest still runs.
// A stand-in vgpuctl does these two wrong and passes the rest to vgpuctl.
func TestRealHostCheckFails(t *testing.T) {
	s := startSim(t, "nvidia-nvml.yaml")
	bin := checkBin(t)
	stub := "#!/bin/sh\n" +
		"case \" $* \" in\n" +
		"*' profiles --gpu 0000:86:00.0 ')\n  echo 'PROFILE  GPU MODEL  DIALECT  SPLIT  FB/VGPU  BACKEND  HOST GPUS'; exit 0 ;;\n" +
		"*' --profile l40s-3q --dry-run '*)\n  echo 'vgpuctl: read something: input/output error' >&2; exit 1 ;;\n" +
		"esac\nexec " + built.vgpuctl + " \"$@\"\n"
	if err := os.Remove(filepath.Join(bin, "vgpuctl")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "vgpuctl"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runCheck(t, s, bin, t.TempDir(), "--nvidia-smi", "", "--timing", "skip")
	r.report(t, 1,
		"| profiles --gpu 0000:86:00.0 | FAIL | an empty table and no reason why nothing fits |",
		"| carve 0000:86:00.0 --profile l40s-3q --dry-run | FAIL | exit 1: vgpuctl: read something: input/output error |",
		"| profiles --gpu 0000:cb:00.0 | PASS |",
		"| vgpud stops cleanly | PASS |",
		"| timing | SKIP | --timing skip |",
		", 2 failed,",
	)
}

// TestRealHostCheckRefusesChanges: the script's vgpuctl runs nothing but
// gpus, profiles, vgpus and carve --dry-run; anything else is refused before
// vgpuctl starts (a stand-in records every start).
func TestRealHostCheckRefusesChanges(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "ran")
	if err := os.WriteFile(filepath.Join(dir, "vgpuctl"), []byte("#!/bin/sh\necho \"$@\" >>"+log+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(built.repo, "scripts", "real-host-check.sh")
	ctl := func(args ...string) (int, string) {
		t.Helper()
		// Sourced, the script defines its functions and runs nothing.
		cmd := exec.Command("bash", append([]string{"-c", `source "$1"; BIN=$2 ROOT=/ WORK=$3; shift 3; ctl "$@"`, "bash", script, dir, dir}, args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	for _, args := range [][]string{
		{"carve", "0000:86:00.0", "--profile", "l40s-12q"},
		{"carve", "0000:86:00.0", "--profile", "l40s-12q", "--dry-run", "--force"},
		{"uncarve", "0000:86:00.0", "--dry-run"},
		{"apply", "--dry-run"},
		{"attach", "dom", "--profile", "l40s-12q"},
		{"release", "dom"},
		{"recover-ledger"},
		{"-o", "json", "gpus"},
	} {
		code, out := ctl(args...)
		if code != 126 || !strings.Contains(out, "real-host-check: refusing vgpuctl") {
			t.Errorf("ctl %s: exit %d, %q; want a refusal", strings.Join(args, " "), code, out)
		}
	}
	if b, err := os.ReadFile(log); err == nil {
		t.Fatalf("refused commands ran vgpuctl:\n%s", b)
	}
	for _, args := range [][]string{{"gpus"}, {"profiles", "--gpu", "0000:86:00.0"}, {"carve", "0000:86:00.0", "--profile", "p", "--dry-run"}, {"vgpus", "-o", "json"}} {
		if code, out := ctl(args...); code != 0 {
			t.Errorf("ctl %s: exit %d, %q", strings.Join(args, " "), code, out)
		}
	}
	if b, err := os.ReadFile(log); err != nil || strings.Count(string(b), "\n") != 4 {
		t.Fatalf("the read-only commands did not all run vgpuctl: %v\n%s", err, b)
	}
}
