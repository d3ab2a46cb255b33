package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/unixhttp"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/engine/enginetest"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// acceptedConn is the server's end of a unix socket connection this
// process dialled, closed at the test's end.
func acceptedConn(t testing.TB) net.Conn {
	t.Helper()
	sock := filepath.Join(shortTemp(t), "p.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The kernel says who connected: this process, as root.
func TestPeerCredIsTheKernels(t *testing.T) {
	p, err := peerCred(acceptedConn(t))
	if err != nil || p.PID != os.Getpid() || p.UID != os.Getuid() || p.GID != os.Getgid() {
		t.Fatalf("peer = %+v, %v; want pid %d uid %d gid %d", p, err, os.Getpid(), os.Getuid(), os.Getgid())
	}
	want, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sortedInts(p.Groups), sortedInts(want)) {
		t.Fatalf("peer groups = %v, want this process's %v", p.Groups, want)
	}
}

// peerGroupsEnv names the socket a child of TestPeerGroupsMany connects to.
const peerGroupsEnv = "VGPU_TEST_PEER_GROUPS_SOCKET"

// More supplementary groups than peerGroups' first buffer holds (64) are
// all read, as the kernel gives them: a child of this test binary with 100
// groups connects.
func TestPeerGroupsMany(t *testing.T) {
	if sock := os.Getenv(peerGroupsEnv); sock != "" { // the child
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, c) // until the parent has read its peer
		return
	}
	if os.Getuid() != 0 {
		t.Skip("setting a child's groups needs root")
	}
	sock := filepath.Join(shortTemp(t), "g.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var groups []uint32
	var want []int
	for g := 100000; g < 100100; g++ {
		groups, want = append(groups, uint32(g)), append(want, g)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerGroupsMany$")
	cmd.Env = append(os.Environ(), peerGroupsEnv+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: groups}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	p, err := peerCred(s)
	// The kernel's answer itself, not procGroups' (the fallback).
	var direct []int
	var derr error
	if raw, rerr := s.(*net.UnixConn).SyscallConn(); rerr != nil {
		derr = rerr
	} else if cerr := raw.Control(func(fd uintptr) { direct, derr = peerGroups(int(fd)) }); cerr != nil {
		derr = cerr
	}
	_ = s.Close()
	if werr := cmd.Wait(); werr != nil {
		t.Errorf("the child: %v", werr)
	}
	if err != nil || p.PID != cmd.Process.Pid {
		t.Fatalf("peer = %+v, %v; want pid %d", p, err, cmd.Process.Pid)
	}
	if !slices.Equal(sortedInts(p.Groups), want) {
		t.Fatalf("peer groups = %v, want %v", p.Groups, want)
	}
	if derr != nil || !slices.Equal(sortedInts(direct), want) {
		t.Fatalf("SO_PEERGROUPS = %v, %v; want %v", direct, derr, want)
	}
}

func sortedInts(v []int) []int {
	v = slices.Clone(v)
	slices.Sort(v)
	return v
}

// A member of the socket's group reads; changes need root or the admin group.
func TestOnlyRootOrAdminsChange(t *testing.T) {
	r := &rig{t: t, k: simkernel.NewExample(t, "mixed.yaml"), peer: &Peer{PID: 4242, UID: 1000, GID: 1000}}
	dir := shortTemp(t)
	r.cfgPath, r.stateDir, r.socket = filepath.Join(dir, "config.yaml"), filepath.Join(dir, "state"), filepath.Join(dir, "vgpud.sock")
	if err := engine.WriteConfig(r.cfgPath, []byte(cfgMixed)); err != nil {
		t.Fatal(err)
	}
	r.run()
	ctx := context.Background()
	if _, err := r.c.VGPUs(ctx); err != nil {
		t.Fatalf("a reader lists vGPUs: %v", err)
	}
	_, err := r.c.Carve(ctx, api.CarveRequest{GPU: "0000:03:00.0", Profile: "mi25-2g"})
	if !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "uid 1000 (pid 4242) may only read") {
		t.Fatalf("carve by uid 1000: %v; want refused", err)
	}
	if _, err := r.c.Reconcile(ctx); err == nil {
		t.Fatal("reconcile by uid 1000 was allowed")
	}
	// The admin group (LookupGroup maps every name to this process's gid).
	r.peer.Groups = []int{os.Getgid()}
	r.stop()
	if err := engine.WriteConfig(r.cfgPath, []byte(cfgMixed+"socket:\n  group: libvirt\n  admin-group: vgpu-admins\n")); err != nil {
		t.Fatal(err)
	}
	r.run()
	if _, err := r.c.Carve(ctx, api.CarveRequest{GPU: "0000:03:00.0", Profile: "mi25-2g"}); err != nil {
		t.Fatalf("carve by an admin-group member: %v", err)
	}
	// An admin may carve, not open vgpud to others.
	open := cfgMixed + "socket:\n  group: libvirt\n  admin-group: vgpu-admins\nmetrics:\n  listen: \"0.0.0.0:0\"\n"
	if _, err := r.c.Apply(ctx, []byte(open), false); err == nil || !strings.Contains(err.Error(), "may not change socket or metrics") {
		t.Fatalf("apply opening metrics by an admin: %v; want refused", err)
	}
	if r.d.MetricsAddr() != "" {
		t.Fatalf("metrics opened on %s", r.d.MetricsAddr())
	}
}

// Made-up methods count as "other" in the request metrics.
func TestMetricsMethodLabelBounded(t *testing.T) {
	r := startMixed(t)
	hc := unixhttp.NewClient(r.socket)
	for i := range 20 {
		req, _ := http.NewRequest(fmt.Sprintf("M%d", i), "http://vgpud/v1/health", nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := hc.Get("http://vgpud" + api.PathMetrics)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "vgpu_api_request") && strings.Contains(l, `method="M`) {
			t.Fatalf("a made-up method is a label value: %s", l)
		}
	}
	if !bytes.Contains(body, []byte(`method="other"`)) {
		t.Fatal(`no request counted under method="other"`)
	}
}

// Apply and reload are serialised and report the generation in force;
// a reload that changes who may connect needs a file only root can write.
func TestGenerationsAndRootOwnedReload(t *testing.T) {
	r := startMixed(t)
	ctx := context.Background()
	if h, err := r.c.Health(ctx); err != nil || h.ConfigGeneration != 1 {
		t.Fatalf("health at start: %+v, %v; want generation 1", h, err)
	}
	rep, err := r.c.Apply(ctx, []byte(cfgMixedDestroy), false)
	if err != nil || rep.Generation != 2 {
		t.Fatalf("apply: generation %d, %v; want 2", rep.Generation, err)
	}
	if rep, err := r.d.Reload(ctx); err != nil || rep.Generation != 3 {
		t.Fatalf("reload: generation %d, %v; want 3", rep.Generation, err)
	}
	open := cfgMixedDestroy + "metrics:\n  listen: \"127.0.0.1:0\"\n"
	if err := engine.WriteConfig(r.cfgPath, []byte(open)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(r.cfgPath, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := r.d.Reload(ctx); err == nil || !strings.Contains(err.Error(), "owned by uid 1000") {
		t.Fatalf("reload of a file uid 1000 owns that opens metrics: %v; want refused", err)
	}
	if h, _ := r.c.Health(ctx); h.ConfigGeneration != 3 || r.d.MetricsAddr() != "" {
		t.Fatalf("after the refused reload: generation %d, metrics %q", h.ConfigGeneration, r.d.MetricsAddr())
	}
	if err := os.Chown(r.cfgPath, 0, 0); err != nil {
		t.Fatal(err)
	}
	if rep, err := r.d.Reload(ctx); err != nil || rep.Generation != 4 || r.d.MetricsAddr() == "" {
		t.Fatalf("reload of root's file: generation %d, metrics %q, %v", rep.Generation, r.d.MetricsAddr(), err)
	}
}

// A reserved VF is reserved, not in use; in use is a process holding it.
func TestReservedIsNotInUse(t *testing.T) {
	r := startMixed(t)
	h, err := r.c.Reserve(context.Background(), domA, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 1})
	if err != nil || len(h.Allocations) != 1 {
		t.Fatalf("reserve: %+v, %v", h, err)
	}
	id := h.Allocations[0].VGPU
	row := func() api.VGPU {
		vs, err := r.c.VGPUs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if v.ID == id {
				return v
			}
		}
		t.Fatalf("vgpus does not list %s", id)
		return api.VGPU{}
	}
	if v := row(); v.State != "reserved" || v.InUse || v.Holder != "" {
		t.Fatalf("reserved %s: state %q, inUse %v, holder %q; want reserved and not in use", id, v.State, v.InUse, v.Holder)
	}
	g, _, _ := pci.IOMMUGroup(r.k, pci.MustParseAddress(id))
	qemu, err := r.k.Open(pci.GroupDevicePath(g))
	if err != nil {
		t.Fatal(err)
	}
	defer qemu.Close()
	if v := row(); !v.InUse || !strings.Contains(v.Holder, "qemu-system-x86") {
		t.Fatalf("held %s: inUse %v, holder %q; want QEMU named", id, v.InUse, v.Holder)
	}
}

// A process whose open files vgpud cannot read (no CAP_SYS_PTRACE) does not
// fail the listing: every vGPU nobody visible holds is of unknown use, the
// answer carries one warning naming the process and the capability, and an
// uncarve that would destroy such vGPUs is refused unless forced.
func TestListingWithUnreadableProcess(t *testing.T) {
	r := startMixed(t)
	ctx := context.Background()
	hidden := simkernel.Opener{PID: 5151, Comm: "qemu-hidden"}
	ctl, err := r.k.OpenAs(hidden, "/dev/vfio/vfio")
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	r.k.SetFDsUnreadable(hidden.PID, true)
	vs, warning, err := r.c.VGPUsWarning(ctx)
	if err != nil {
		t.Fatalf("listing with an unreadable process: %v", err)
	}
	if !strings.Contains(warning, "qemu-hidden (pid 5151)") || !strings.Contains(warning, "CAP_SYS_PTRACE") {
		t.Fatalf("warning %q does not name the process and CAP_SYS_PTRACE", warning)
	}
	unknown := 0
	for _, v := range vs {
		if v.InUse {
			t.Errorf("%s in use by %q: nobody visible holds it", v.ID, v.Holder)
		}
		if v.UseUnknown {
			unknown++
		}
	}
	if unknown == 0 {
		t.Fatalf("no vGPU of unknown use among %d", len(vs))
	}
	_, err = r.c.Uncarve(ctx, api.UncarveRequest{GPU: "0000:03:00.0"})
	if !errors.Is(err, client.ErrInUse) || !strings.Contains(err.Error(), "CAP_SYS_PTRACE") {
		t.Fatalf("uncarve of VFs of unknown use: %v, want refused naming CAP_SYS_PTRACE", err)
	}
	r.k.SetFDsUnreadable(hidden.PID, false)
	if _, warning, err := r.c.VGPUsWarning(ctx); err != nil || warning != "" {
		t.Fatalf("once readable: warning %q, %v", warning, err)
	}
}

// On a stock host without vfio-pci or vfio_iommu_type1, vgpud with GPUs to
// manage refuses to start, naming the module; without a config it serves.
func TestMissingModuleRefusesStart(t *testing.T) {
	for _, mod := range []string{"vfio-pci", "vfio_iommu_type1"} {
		k, err := simkernel.New(simkernel.Host{Version: simkernel.HostVersion, Unloaded: []string{mod},
			GPUs: []simkernel.HostGPU{{Model: "mi25", Address: pci.MustParseAddress("0000:03:00.0")}}})
		if err != nil {
			t.Fatal(err)
		}
		dir := shortTemp(t)
		cfg := filepath.Join(dir, "config.yaml")
		if err := engine.WriteConfig(cfg, []byte("version: v1\ngpus:\n  - address: \"0000:03:00.0\"\n    profile: mi25-4g\n")); err != nil {
			t.Fatal(err)
		}
		_, err = New(Options{ConfigPath: cfg, FS: k, StateDir: filepath.Join(dir, "state"), SocketPath: filepath.Join(dir, "s"), Logger: enginetest.Logger()})
		if !errors.Is(err, ErrModule) || !strings.Contains(err.Error(), "modprobe "+mod) {
			t.Fatalf("%s not loaded: New = %v; want ErrModule naming it", mod, err)
		}
		d, err := New(Options{ConfigPath: filepath.Join(dir, "none.yaml"), FS: k, StateDir: filepath.Join(dir, "state2"), SocketPath: filepath.Join(dir, "s"), Logger: enginetest.Logger()})
		if err != nil {
			t.Fatalf("%s not loaded, no config: %v", mod, err)
		}
		d.Close()
	}
}

// BenchmarkPeerCred: what the gate spends to name the peer of each
// connection it accepts (SO_PEERCRED and SO_PEERGROUPS), the cost a member
// holding thousands of connections, each redialled when closed, makes
// vgpud pay per dial.
func BenchmarkPeerCred(b *testing.B) {
	s := acceptedConn(b)
	b.Run("SO_PEERGROUPS", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := peerCred(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What the groups cost before SO_PEERGROUPS (and still on kernels
	// without it), on top of SO_PEERCRED.
	b.Run("proc-status", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = procGroups(os.Getpid())
		}
	})
}
