//go:build labguest

// Package guest holds the tests that run inside the lab guest, against the
// real kernel's /sys and /dev/vfio. The host side (e2e/lab, build tag e2e)
// builds this package with `go test -c -tags labguest`, boots the guest
// and runs the binary there; run elsewhere it fails at once.
package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvstaterpc"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// The lab's share, mounted by the guest's init.
const (
	labDir      = "/lab"
	profilesDir = labDir + "/profiles"
	outDir      = labDir + "/out"
	// binDir holds the share's bin/ as lab-init copied it into the guest's
	// root, first on PATH: what a host runs from its disk.
	binDir = "/usr/local/lib/vgpu-lab"
)

// The lab's devices (e2e/lab/run.sh).
var (
	igbPF  = pci.MustParseAddress("0000:01:00.0")
	nvmePF = pci.MustParseAddress("0000:02:00.0")
	// A two-function card: e1000e and, in its IOMMU group, HD audio.
	cardPF    = pci.MustParseAddress("0000:03:00.0")
	cardAudio = pci.MustParseAddress("0000:03:00.1")
)

func TestMain(m *testing.M) {
	if h, _ := os.Hostname(); h != "lab" {
		fmt.Fprintln(os.Stderr, "these tests run inside the lab guest; run them with: go test -tags e2e ./e2e/lab")
		os.Exit(1)
	}
	if os.Getenv(nvmlCallEnv) != "" {
		os.Exit(nvmlCall())
	}
	os.Exit(m.Run())
}

// host is the real kernel.
var host = sysfs.NewOS("/")

// run runs a command with a timeout and returns its stdout, stderr and exit
// code; a command that cannot start fails the test.
func run(t *testing.T, name string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runFor(t, 2*time.Minute, name, args...)
}

// runFor is run with its own limit, for a command that waits on something
// slow by design (libvirtd's start of day with autostarted domains).
func runFor(t *testing.T, limit time.Duration, name string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	// A killed command's children (dpkg-deb's compressor) may hold its
	// output pipes: stop waiting for them soon after, not when they end.
	cmd.WaitDelay = 10 * time.Second
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run %s %s: %v", name, strings.Join(args, " "), err)
	}
	t.Logf("$ %s %s -> exit %d\n%s%s", name, strings.Join(args, " "), code, o.String(), e.String())
	return o.String(), e.String(), code
}

// vgpuctl runs the project's vgpuctl with the lab's test catalog and a
// state directory of its own.
func vgpuctl(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	full := append([]string{"--profiles", profilesDir, "--state-dir", stateDir(t)}, args...)
	return run(t, "vgpuctl", full...)
}

var stateDirs = map[string]string{}

// stateDir is one directory per top-level test, on the guest's tmpfs.
func stateDir(t *testing.T) string {
	name := strings.SplitN(t.Name(), "/", 2)[0]
	if d, ok := stateDirs[name]; ok {
		return d
	}
	d := filepath.Join(os.TempDir(), "vgpu-state-"+name)
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	stateDirs[name] = d
	return d
}

func decode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}

func readAttr(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return strings.TrimSpace(string(b))
}

func driverOf(t *testing.T, a pci.Address) string {
	t.Helper()
	d, err := pci.CurrentDriver(host, a)
	if err != nil {
		t.Fatalf("driver of %s: %v", a, err)
	}
	return d
}

// relabelAsGPU makes the class of the given PCI functions read 0x120000 (a
// processing accelerator) for every program in the guest, by bind-mounting
// a file over their sysfs class attribute, until the test ends. vgpu lists
// and carves only display and accelerator classes, and the lab's SR-IOV
// devices (igb, NVMe) are a NIC and a disk: relabelled, they are handled as
// GPUs by the unmodified binaries, while every other attribute they read,
// and every write, is the real kernel's.
func relabelAsGPU(t *testing.T, addrs ...pci.Address) {
	t.Helper()
	label := filepath.Join(os.TempDir(), "accelerator-class")
	if err := os.WriteFile(label, []byte("0x120000\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		attr := pci.DevicePath(a) + "/class"
		if err := unix.Mount(label, attr, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("relabel %s: bind-mount over %s: %v", a, attr, err)
		}
		t.Cleanup(func() {
			if err := unix.Unmount(attr, 0); err != nil {
				t.Errorf("undo the relabel of %s: %v", a, err)
			}
		})
	}
}

// settleDriver waits until a's driver is want (drivers such as nvme probe
// asynchronously), then fails the test if it is not.
func settleDriver(t *testing.T, a pci.Address, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := driverOf(t, a)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: driver %q, want %q", a, got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nvmlCallEnv makes this binary, instead of running tests, start the NVML
// helper as vgpud does (nvstaterpc.Helper: vgpu-nvml found through
// VGPU_NVML_HELPER, its socket on fd 3) and ask the igb PF's MIG mode;
// checkHelperSandbox runs it under vgpud's sandbox.
const nvmlCallEnv = "VGPU_LAB_NVML_CALL"

// nvmlCallAnswer is the helper's answer on a host without NVIDIA's NVML
// (pkg/nvstate/nvmlstate): the library did not load.
const nvmlCallAnswer = "did not load"

// nvmlCall exits 0 when the helper started and answered that NVML is
// unavailable because the library did not load; anything else (the exec
// refused, the helper killed by the seccomp filter, another error) is 1.
func nvmlCall() int {
	_, err := nvstaterpc.Helper("").Mode(igbPF)
	fmt.Printf("MIG mode of %s through vgpu-nvml: %v\n", igbPF, err)
	if errors.Is(err, nvstate.ErrUnavailable) && strings.Contains(err.Error(), nvmlCallAnswer) {
		return 0
	}
	return 1
}
