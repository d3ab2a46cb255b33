//go:build cgo

package nvstaterpc_test

import (
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvstaterpc"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

var (
	a100 = pci.MustParseAddress("0000:ca:00.0")
	l40s = pci.MustParseAddress("0000:86:00.0")
)

// serve runs Handler over a fake NVML of an A100 and an L40S on a socket
// in dir, and returns a Client of it and the same NVML in process.
func serve(t *testing.T, dir string) (*nvstaterpc.Client, nvstate.Manager) {
	t.Helper()
	nv, err := simnvml.New(simnvml.GPU{Model: simnvml.ModelA100PCIe40GB, BusID: a100.String()},
		simnvml.GPU{Model: simnvml.ModelL40S, BusID: l40s.String()})
	if err != nil {
		t.Fatal(err)
	}
	local := nvmlstate.NewWith(nv, "simnvml")
	sock := filepath.Join(dir, "nvml.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: nvstaterpc.Handler(local)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return nvstaterpc.Dial(sock), local
}

// TestRoundTrip: every call across the socket answers what the same call
// in process answers, and an error keeps its sentinel and its words.
func TestRoundTrip(t *testing.T) {
	c, local := serve(t, t.TempDir())
	if err := c.SetMode(a100, true); err != nil {
		t.Fatal(err)
	}
	if md, err := c.Mode(a100); err != nil || md != (nvstate.Mode{Current: true, Pending: true}) {
		t.Fatalf("mode = %+v, %v", md, err)
	}
	start := 4
	in, err := c.Create(a100, 9, &start)
	if err != nil || in.ProfileID != 9 || in.Start != 4 || in.Size != 4 {
		t.Fatalf("3g.20gb at 4 = %+v, %v", in, err)
	}
	if _, err := c.Create(a100, 9, &start); !errors.Is(err, nvstate.ErrNoRoom) {
		t.Fatalf("a second 3g.20gb at 4: %v, want mig.ErrNoRoom", err)
	}
	other, err := c.Create(a100, 14, nil)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := c.Instances(a100)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := local.Instances(a100)
	if len(remote) != 2 || !reflect.DeepEqual(remote, want) {
		t.Fatalf("instances over the socket %+v, in process %+v", remote, want)
	}
	if err := c.Destroy(a100, other.ID); err != nil {
		t.Fatal(err)
	}
	// MIG cannot go off while an instance exists.
	errRemote := c.SetMode(a100, false)
	errLocal := local.SetMode(a100, false)
	if errRemote == nil || errLocal == nil || errRemote.Error() != errLocal.Error() || errors.Is(errLocal, nvstate.ErrInUse) != errors.Is(errRemote, nvstate.ErrInUse) {
		t.Fatalf("MIG off with an instance: over the socket %v, in process %v", errRemote, errLocal)
	}

	sizes, err := c.Sizes(a100)
	wantSizes, _ := local.Sizes(a100)
	if err != nil || sizes.TotalMB == 0 || len(sizes.Profiles) != 7 || !reflect.DeepEqual(sizes, wantSizes) {
		t.Fatalf("sizes over the socket %+v, %v; in process %+v", sizes, err, wantSizes)
	}

	types, err := c.VGPUTypes(l40s)
	if err != nil || len(types) == 0 {
		t.Fatalf("L40S vGPU types = %v, %v", types, err)
	}
	wantTypes, _ := local.VGPUTypes(l40s)
	if !reflect.DeepEqual(types, wantTypes) {
		t.Fatalf("types over the socket %v, in process %v", types, wantTypes)
	}
	fixed := nvstate.Sched{Policy: nvstate.PolicyFixedShare, ARR: nvstate.ARRDisable, TimesliceNS: 3_000_000}
	if err := c.SetScheduler(l40s, fixed); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Scheduler(l40s); err != nil || s.Policy != nvstate.PolicyFixedShare || s.TimesliceNS != 3_000_000 {
		t.Fatalf("scheduler = %+v, %v", s, err)
	}
	// Mixed-size mode: refused with the fixed-share scheduler set above,
	// then set; and NOT_SUPPORTED on the A100 with MIG on, both keeping
	// their sentinel.
	if err := c.SetMixedSize(l40s, true); !errors.Is(err, nvstate.ErrNotSupported) {
		t.Fatalf("mixed-size mode with fixed share: %v, want mig.ErrNotSupported", err)
	}
	if err := c.SetScheduler(l40s, nvstate.Sched{Policy: nvstate.PolicyBestEffort}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetMixedSize(l40s, true); err != nil {
		t.Fatal(err)
	}
	if on, err := c.MixedSize(l40s); err != nil || !on {
		t.Fatalf("mixed-size mode = %v, %v", on, err)
	}
	if _, err := c.MixedSize(a100); !errors.Is(err, nvstate.ErrNotSupported) {
		t.Fatalf("mixed-size mode with MIG on: %v, want mig.ErrNotSupported", err)
	}
	if _, err := c.Instances(pci.MustParseAddress("0000:01:00.0")); err == nil || !strings.Contains(err.Error(), "0000:01:00.0") {
		t.Fatalf("a GPU NVML does not know: %v", err)
	}
	// The vGPU host driver: its mode and, for an SR-IOV board, SR-IOV.
	if v, err := c.Virtualization(l40s); err != nil || v != (nvstate.Virt{Mode: nvstate.VirtHostVGPU, HostVGPU: nvstate.HostVGPUSRIOV}) {
		t.Fatalf("virtualization = %+v, %v", v, err)
	}
}

// TestGone: a simulated host that went away is NVML unavailable, in one
// line naming the socket.
func TestGone(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nvml.sock")
	_, err := nvstaterpc.Dial(sock).Mode(a100)
	if !errors.Is(err, nvstate.ErrUnavailable) || !strings.Contains(err.Error(), sock) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("mode with no server: %v", err)
	}
}

// TestOpen: a root holding the socket gets it; "/" and a root without one
// get the library.
func TestOpen(t *testing.T) {
	root := t.TempDir()
	t.Setenv(nvstaterpc.HelperEnv, "/no/such/vgpu-nvml")
	if _, err := nvstaterpc.Open(root, "").Mode(a100); !errors.Is(err, nvstate.ErrUnavailable) || !strings.Contains(err.Error(), "/no/such/vgpu-nvml") {
		t.Fatalf("a root without the socket: err = %v, want the helper's", err)
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(nvstate.SimSocket)), 0o755); err != nil {
		t.Fatal(err)
	}
	serve(t, filepath.Join(root, filepath.Dir(nvstate.SimSocket)))
	if _, err := nvstaterpc.Open("/", "").Mode(a100); !strings.Contains(err.Error(), "/no/such/vgpu-nvml") {
		t.Fatalf(`"/": err = %v, want the helper's`, err)
	}
	if _, err := nvstaterpc.Open(root, "").Mode(a100); err != nil {
		t.Fatal(err)
	}
}
