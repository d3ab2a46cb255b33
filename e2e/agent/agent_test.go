package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/internal/sim/kernel/fusefs"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/client/clienttest"
	"github.com/vgpu-project/vgpu/pkg/engine/enginetest"
	"github.com/vgpu-project/vgpu/pkg/ledger"
)

const (
	mi25 = "0000:03:00.0"
	t4   = "0000:3b:00.0"
	l40s = "0000:86:00.0"

	domA = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
	domB = "8f5b7e2a-0c1d-4e3f-9a8b-7c6d5e4f3a2b"
	domC = "2a1b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
	// mdev identities as the hook derives them from the domain.
	mdevB0 = "1c5d3b62-8b4f-5e72-ad20-3f9e7c5b4d20"

	cfgMixed = enginetest.MixedConfig
)

var bg = context.Background()

// held maps each vGPU to its state and holder, for comparisons.
func held(t testing.TB, c *client.Client) map[string]string {
	t.Helper()
	h, err := c.Allocations(bg)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, a := range h.Allocations {
		out[a.VGPU] = a.DomainUUID + "/" + a.State
	}
	return out
}

// checkConsistent checks the host equals the config, every allocation's
// vGPU exists and is listed with its domain, and the rest are free.
func checkConsistent(t testing.TB, c *client.Client, wantAllocs int) {
	t.Helper()
	a, err := c.Assert(bg, nil)
	if err != nil || !a.Match {
		t.Fatalf("host differs from the config: %+v, %v", a, err)
	}
	h, err := c.Allocations(bg)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := c.VGPUs(bg)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]api.VGPU{}
	for _, v := range vs {
		byID[v.ID] = v
	}
	for _, al := range h.Allocations {
		v, ok := byID[al.VGPU]
		if !ok || v.DomainUUID != al.DomainUUID {
			t.Fatalf("allocation %+v: vGPU listed as %+v (present %v)", al, v, ok)
		}
	}
	if len(h.Allocations) != wantAllocs {
		t.Fatalf("%d allocations, want %d: %+v", len(h.Allocations), wantAllocs, h.Allocations)
	}
	free := 0
	for _, v := range vs {
		if v.State == api.StateFree {
			free++
		}
	}
	if free+len(h.Allocations)+len(h.Leases) != len(vs) {
		t.Fatalf("%d free + %d allocated + %d leased != %d vGPUs", free, len(h.Allocations), len(h.Leases), len(vs))
	}
}

// noOpenIntents stops vgpud and reads its ledger.
func (h *host) noOpenIntents() {
	h.t.Helper()
	h.stopAgent()
	l, err := ledger.Open(filepath.Join(h.state, "ledger.db"), ledger.WithReadOnly())
	if err != nil {
		h.t.Fatal(err)
	}
	defer l.Close()
	if open, err := l.OpenIntents(); err != nil || len(open) != 0 {
		h.t.Fatalf("open intents after repair: %+v, %v", open, err)
	}
}

// TestReboot carves by config, gives vGPUs to domains, then stops vgpud
// and vgpusim and boots a fresh vgpusim (no VFs, no mdevs) with the same
// config and ledger: every vGPU comes back, the allocations intact.
func TestReboot(t *testing.T) {
	h := newHost(t, "mixed.yaml", cfgMixed)
	h.startAgent()
	if _, err := h.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 2}); err != nil {
		t.Fatal(err)
	}
	a, _ := h.c.Allocations(bg)
	ids := []string{a.Allocations[0].VGPU, a.Allocations[1].VGPU}
	if _, err := h.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "mi25-4g", VGPUs: ids}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Prepare(bg, domB, api.PrepareRequest{Name: "db01", Profile: "t4-4q", VGPUs: []string{mdevB0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Reserve(bg, domC, api.ReserveRequest{Name: "gpu01", Profile: "l40s-12q", Count: 1}); err != nil {
		t.Fatal(err)
	}
	before := held(t, h.c)
	vsBefore, _ := h.c.VGPUs(bg)

	h.stopAgent()
	h.rebootSim()
	h.startAgent()

	after := held(t, h.c)
	if len(after) != len(before) {
		t.Fatalf("allocations before the reboot %v, after %v", before, after)
	}
	for id, was := range before {
		// No VM survives a reboot: attached allocations come back reserved.
		want := strings.Replace(was, "/attached", "/reserved", 1)
		if after[id] != want {
			t.Errorf("%s: %s before the reboot, %s after; want %s", id, was, after[id], want)
		}
	}
	vsAfter, _ := h.c.VGPUs(bg)
	key := func(vs []api.VGPU) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.ID+" "+v.Profile+" "+v.DomainUUID)
		}
		slices.Sort(out)
		return out
	}
	if !slices.Equal(key(vsBefore), key(vsAfter)) {
		t.Fatalf("vGPUs before the reboot:\n%s\nafter:\n%s", strings.Join(key(vsBefore), "\n"), strings.Join(key(vsAfter), "\n"))
	}
	checkConsistent(t, h.c, 4)
	// The domain starts again on the same vGPUs.
	if _, err := h.c.Prepare(bg, domB, api.PrepareRequest{Name: "db01", Profile: "t4-4q", VGPUs: []string{mdevB0}}); err != nil {
		t.Fatal(err)
	}
}

// TestSystemdNotify sets up NOTIFY_SOCKET and WATCHDOG_USEC as systemd
// does for Type=notify with WatchdogSec, and reads what vgpud sends.
func TestSystemdNotify(t *testing.T) {
	h := newHost(t, "mi25.yaml", "version: v1\ngpus:\n  - address: \"0000:03:00.0\"\n    profile: mi25-4g\n")
	path := filepath.Join(h.dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h.env = []string{"NOTIFY_SOCKET=" + path, "WATCHDOG_USEC=200000"}
	h.agent = h.spawnAgent()
	start := time.Now()
	var got []string
	buf := make([]byte, 512)
	next := func() string {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("after %v: %v\nvgpud:\n%s", got, err, h.agentOut())
		}
		msg := strings.TrimSpace(string(buf[:n]))
		got = append(got, msg)
		return msg
	}
	if m := next(); m != "READY=1" {
		t.Fatalf("first message %q, want READY=1", m)
	}
	// READY comes after the first reconcile: the host is carved already.
	a, err := h.c.Assert(bg, nil)
	if err != nil || !a.Match {
		t.Fatalf("assert right after READY: %+v, %v", a, err)
	}
	t.Logf("READY after %v", time.Since(start))
	for range 3 {
		if m := next(); m != "WATCHDOG=1" {
			t.Fatalf("got %q, want WATCHDOG=1", m)
		}
	}
	h.stopAgent()
	for m := next(); m != "STOPPING=1"; m = next() {
		if m != "WATCHDOG=1" {
			t.Fatalf("got %q before STOPPING=1", m)
		}
	}
}

// TestConcurrency races 200 reserve/unreserve calls from a pool of
// goroutines through the client for 16 vGPUs: no vGPU is ever held by two
// domains, and none is left held.
func TestConcurrency(t *testing.T) {
	h := newHost(t, "mi25.yaml", "version: v1\ngpus:\n  - address: \"0000:03:00.0\"\n    profile: mi25-1g\n")
	h.startAgent()
	const calls = 200
	r := clienttest.RaceReserve(h.c, client.ErrNoCapacity, "mi25-1g", calls, 32, 2*time.Millisecond)
	if len(r.Errs) > 0 || r.Doubles > 0 || r.Reserved+r.Full != calls || r.Reserved < 16 {
		t.Fatalf("doubles %d, reserved %d, refused %d, errors %v", r.Doubles, r.Reserved, r.Full, r.Errs)
	}
	checkConsistent(t, h.c, 0)
	vs, _ := h.c.VGPUs(bg)
	if len(vs) != 16 {
		t.Fatalf("%d vGPUs, want 16", len(vs))
	}
	t.Logf("%d reserved, %d refused for capacity", r.Reserved, r.Full)
}

// TestAPIValidationOverSocket sends bad requests to the real daemon: each
// gets a 4xx with a message, and nothing reaches the kernel or the ledger.
func TestAPIValidationOverSocket(t *testing.T) {
	h := newHost(t, "mixed.yaml", cfgMixed)
	h.startAgent()
	if _, err := h.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "t4-4q", Count: 1}); err != nil {
		t.Fatal(err)
	}
	watched := []string{"/sys/bus/pci/devices/" + mi25 + "/sriov_numvfs", "/sys/bus/pci/drivers_probe",
		"/sys/class/mdev_bus/" + t4 + "/mdev_supported_types/nvidia-232/create"}
	writes := func() []int {
		var out []int
		for _, p := range watched {
			n, err := h.sim.Client.Writes(bg, p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, n)
		}
		return out
	}
	w0, a0 := writes(), held(t, h.c)
	calls := []struct {
		name string
		call func() error
		want error
	}{
		{"bad uuid", func() error {
			_, err := h.c.Reserve(bg, "../../etc", api.ReserveRequest{Name: "x", Profile: "t4-4q", Count: 1})
			return err
		}, client.ErrBadRequest},
		{"unknown profile", func() error {
			_, err := h.c.Reserve(bg, domB, api.ReserveRequest{Name: "x", Profile: "t4-5q", Count: 1})
			return err
		}, client.ErrBadRequest},
		{"name like a path", func() error {
			_, err := h.c.Prepare(bg, domB, api.PrepareRequest{Name: "../x", Profile: "t4-4q", VGPUs: []string{mdevB0}})
			return err
		}, client.ErrBadRequest},
		{"bad vgpu id", func() error {
			_, err := h.c.Prepare(bg, domB, api.PrepareRequest{Name: "x", Profile: "t4-4q", VGPUs: []string{"/dev/vfio/3"}})
			return err
		}, client.ErrBadRequest},
		{"bad address", func() error {
			_, err := h.c.Carve(bg, api.CarveRequest{GPU: "03:00", Profile: "mi25-2g"})
			return err
		}, client.ErrBadRequest},
		{"uncarve in use", func() error {
			_, err := h.c.Uncarve(bg, api.UncarveRequest{GPU: t4})
			return err
		}, client.ErrInUse},
		{"config for another host", func() error {
			_, err := h.c.Apply(bg, []byte("version: v1\ngpus:\n  - address: \"0000:99:00.0\"\n    profile: mi25-4g\n"), false)
			return err
		}, client.ErrBadRequest},
		{"another domain's vGPU", func() error {
			a, _ := h.c.Allocations(bg)
			_, err := h.c.Prepare(bg, domB, api.PrepareRequest{Name: "x", Profile: "t4-4q", VGPUs: []string{a.Allocations[0].VGPU}})
			return err
		}, client.ErrConflict},
	}
	for _, c := range calls {
		err := c.call()
		var ce *client.Error
		if !errors.Is(err, c.want) || !errors.As(err, &ce) || ce.Status < 400 || ce.Status > 499 || ce.Body.Error == "" {
			t.Errorf("%s: %v (want %v, a 4xx with a message)", c.name, err, c.want)
		}
	}
	if w := writes(); !slices.Equal(w, w0) {
		t.Fatalf("bad requests wrote to the kernel: %v -> %v", w0, w)
	}
	if a := held(t, h.c); fmt.Sprint(a) != fmt.Sprint(a0) {
		t.Fatalf("bad requests changed the ledger: %v -> %v", a0, a)
	}
	if !h.agent.Running() {
		t.Fatal("vgpud died")
	}
}

// mdevCreate is the create attribute of the T4's t4-4q type.
const mdevCreate = "/sys/class/mdev_bus/" + t4 + "/mdev_supported_types/nvidia-232/create"

func mdevRemove(u string) string { return "/sys/bus/mdev/devices/" + u + "/remove" }

func (h *host) hold(path string, nth int) {
	h.t.Helper()
	if _, err := h.sim.Client.Inject(bg, fusefs.FaultRequest{Kind: fusefs.KindHold, Path: path, Nth: nth}); err != nil {
		h.t.Fatal(err)
	}
}

// crash kills vgpud while a write is held, then lets the write happen
// (errno "") or fail, and starts vgpud again.
func (h *host) crash(errno string) {
	h.t.Helper()
	h.sim.WaitHeld(1)
	if err := h.agent.Kill(); err != nil {
		h.t.Fatalf("kill vgpud: %v", err)
	}
	time.Sleep(20 * time.Millisecond) // the signal is pending before the write returns
	if _, err := h.sim.Client.Release(bg, fusefs.ReleaseRequest{Errno: errno}); err != nil {
		h.t.Fatal(err)
	}
	if err := h.agent.Wait(30 * time.Second); err != nil {
		h.t.Fatalf("%v:\n%s", err, h.agent.Out)
	}
	h.c.Close()
	if _, err := h.sim.Client.ClearFaults(bg); err != nil {
		h.t.Fatal(err)
	}
	h.startAgent()
}

func saveLog(t *testing.T, h *host, name string) {
	if t.Failed() {
		_ = os.WriteFile(filepath.Join(h.dir, name+".log"), []byte(h.agentOut()), 0o644)
	}
}

// TestVirtualParentCarvedListed: mbochs carved through a vgpud whose config
// does not name it is listed by GET /v1/vgpus, also after a SIGHUP.
func TestVirtualParentCarvedListed(t *testing.T) {
	h := newHost(t, "mbochs.yaml", "version: v1\n")
	h.args = []string{"--profiles", filepath.Join(built.repo, "e2e", "lab", "profiles")}
	h.startAgent()
	res, err := h.c.Carve(bg, api.CarveRequest{Parent: "mbochs", Profile: "lab-mbochs-64m"})
	if err != nil || res.Applied != 4 {
		t.Fatalf("carve mbochs = %+v, %v", res, err)
	}
	listed := func(when string) {
		t.Helper()
		vs, err := h.c.VGPUs(bg)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, v := range vs {
			if v.GPU == "mbochs" && v.Kind == "mdev" && v.Profile == "lab-mbochs-64m" && v.State == api.StateFree {
				n++
			}
		}
		if n != 4 || len(vs) != 4 {
			t.Fatalf("GET /v1/vgpus %s: %+v; want 4 free lab-mbochs-64m mdevs of mbochs", when, vs)
		}
	}
	listed("after the carve")
	if err := h.agent.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.Await(time.Minute, 50*time.Millisecond, func() bool {
		hl, err := h.c.Health(bg)
		return err == nil && hl.ConfigGeneration == 2
	}); err != nil {
		t.Fatalf("reload on SIGHUP: %v", err)
	}
	listed("after a SIGHUP")
}
