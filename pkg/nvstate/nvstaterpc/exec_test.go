//go:build cgo

package nvstaterpc_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/internal/syncbuf"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvstaterpc"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// The test binary is its own helper: with helperEnv set it serves a fake
// NVML on fd 3, as vgpu-nvml serves libnvidia-ml, and writes its pid into
// the directory the variable names.
const (
	helperEnv = "MIGRPC_TEST_HELPER"
	hangEnv   = "MIGRPC_TEST_HANG" // its Mode never returns
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(helperMain(dir))
	}
	os.Exit(m.Run())
}

func helperMain(dir string) int {
	if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())), nil, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	nv, err := simnvml.New(simnvml.GPU{Model: simnvml.ModelA100PCIe40GB, BusID: a100.String()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var m nvstate.Manager = nvmlstate.NewWith(nv, "simnvml")
	if os.Getenv(hangEnv) != "" {
		m = hanging{m}
	}
	c, err := net.FileConn(os.NewFile(3, "nvml"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := nvstaterpc.ServeConn(c, nvstaterpc.Handler(m)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type hanging struct{ nvstate.Manager }

func (hanging) Mode(pci.Address) (nvstate.Mode, error) { select {} }

// helpers starts the test binary as the helper and returns the directory
// its runs write their pids into.
func helpers(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv(helperEnv, dir)
	return dir
}

// pids lists the helpers started so far.
func pids(t *testing.T, dir string) []int {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range es {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// gone waits for pid to have exited and been reaped.
func gone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
	}
	t.Fatalf("helper %d still runs after %v", pid, within)
}

// TestExec: calls go to one helper process that keeps its state between
// them, errors keep their sentinel, and the helper exits once idle; the
// next call starts another.
func TestExec(t *testing.T) {
	dir := helpers(t)
	var stderr syncbuf.Buffer
	c := nvstaterpc.ExecWith(os.Args[0], nil, &stderr, 300*time.Millisecond, 10*time.Second)
	if err := c.SetMode(a100, true); err != nil {
		t.Fatal(err)
	}
	if md, err := c.Mode(a100); err != nil || md != (nvstate.Mode{Current: true, Pending: true}) {
		t.Fatalf("mode = %+v, %v", md, err)
	}
	if _, err := c.MixedSize(a100); !errors.Is(err, nvstate.ErrNotSupported) {
		t.Fatalf("mixed-size with MIG on: err = %v, want ErrNotSupported", err)
	}
	ps := pids(t, dir)
	if len(ps) != 1 {
		t.Fatalf("%d helpers for three calls, want 1", len(ps))
	}
	gone(t, ps[0], 5*time.Second)
	if md, err := c.Mode(a100); err != nil || md.Current {
		t.Fatalf("mode from a new helper = %+v, %v", md, err)
	}
	if n := len(pids(t, dir)); n != 2 {
		t.Fatalf("%d helpers after an idle stop and a call, want 2", n)
	}
	if stderr.String() != "" {
		t.Fatalf("helpers wrote on stderr: %s", stderr.String())
	}
}

// TestExecHelperKilled: a helper that died between calls is replaced at
// the next call, which succeeds.
func TestExecHelperKilled(t *testing.T) {
	dir := helpers(t)
	c := nvstaterpc.ExecWith(os.Args[0], nil, os.Stderr, time.Minute, 10*time.Second)
	if _, err := c.Mode(a100); err != nil {
		t.Fatal(err)
	}
	first := pids(t, dir)[0]
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	gone(t, first, 5*time.Second)
	if _, err := c.Mode(a100); err != nil {
		t.Fatalf("the call after the helper died: %v", err)
	}
	if n := len(pids(t, dir)); n != 2 {
		t.Fatalf("%d helpers, want 2", n)
	}
}

// TestExecHelperStuck: a call the helper does not answer in time fails
// as unavailable, and the helper is killed.
func TestExecHelperStuck(t *testing.T) {
	dir := helpers(t)
	t.Setenv(hangEnv, "1")
	// Long enough for the race-built helper to start and record its pid on
	// a loaded 2-core machine (at 500 ms it was killed before it wrote it).
	c := nvstaterpc.ExecWith(os.Args[0], nil, os.Stderr, time.Minute, 5*time.Second)
	_, err := c.Mode(a100)
	if !errors.Is(err, nvstate.ErrUnavailable) || !strings.Contains(err.Error(), "GPU 0000:ca:00.0") ||
		!strings.Contains(err.Error(), os.Args[0]) {
		t.Fatalf("err = %v", err)
	}
	ps := pids(t, dir)
	if len(ps) != 1 {
		t.Fatalf("%d helpers recorded for one stuck call, want 1", len(ps))
	}
	gone(t, ps[0], 10*time.Second)
}

// TestExecMissing: a helper that is not installed makes every call fail
// as unavailable, naming the program.
func TestExecMissing(t *testing.T) {
	c := nvstaterpc.Exec("/no/such/vgpu-nvml", nil, os.Stderr)
	if _, err := c.Instances(a100); !errors.Is(err, nvstate.ErrUnavailable) || !strings.Contains(err.Error(), "/no/such/vgpu-nvml") {
		t.Fatalf("err = %v", err)
	}
	t.Setenv(nvstaterpc.HelperEnv, "")
	_, err := nvstaterpc.Helper("").Instances(a100)
	if !errors.Is(err, nvstate.ErrUnavailable) || !strings.Contains(err.Error(), "vgpu-nvml is in none of") {
		t.Fatalf("Helper beside the test binary: err = %v", err)
	}
}
