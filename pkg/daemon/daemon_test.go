package daemon

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/unixhttp"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/client/clienttest"
	"github.com/vgpu-project/vgpu/pkg/engine/enginetest"
	"github.com/vgpu-project/vgpu/pkg/ledger"
)

func TestMetricsExposed(t *testing.T) {
	r := start(t, simkernel.NewExample(t, "mixed.yaml"), cfgMixed+"metrics:\n  listen: 127.0.0.1:0\n")
	if _, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 1}); err != nil {
		t.Fatal(err)
	}
	_, _ = r.c.Reserve(bg, domB, api.ReserveRequest{Name: "db01", Profile: "mi25-4g", Count: 9}) // an error
	addr := r.d.MetricsAddr()
	if addr == "" {
		t.Fatal("no metrics listener")
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	for _, want := range []string{
		`vgpu_vgpus{gpu="0000:03:00.0",profile="mi25-4g",state="allocated"} 1`,
		`vgpu_vgpus{gpu="0000:03:00.0",profile="mi25-4g",state="free"} 3`,
		`vgpu_vgpus{gpu="0000:86:00.0",profile="l40s-12q",state="leased"} 0`,
		`vgpu_vgpus_total{gpu="0000:3b:00.0",profile="t4-4q"} 4`,
		`vgpu_operation_duration_seconds_count{operation="reconcile"} 1`,
		`vgpu_operation_duration_seconds_count{operation="carve"} 3`,
		`vgpu_operation_duration_seconds_count{operation="allocate"} 2`,
		`vgpu_operation_errors_total{operation="allocate"} 1`,
		`vgpu_api_request_duration_seconds_count{code="200",method="POST",route="POST /v1/domains/{uuid}/reservations"} 1`,
		`vgpu_api_request_duration_seconds_count{code="409",method="POST",route="POST /v1/domains/{uuid}/reservations"} 1`,
		`vgpu_reconcile_drift 0`,
		`vgpu_reconcile_gpu_changes_total{outcome="changed"} 3`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The same metrics on the API socket.
	resp, err = unixhttp.NewClient(r.socket).Get("http://vgpud/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics on the socket: %v %v", resp, err)
	}
	resp.Body.Close()
	// A config without metrics stops the listener.
	r.writeConfig(cfgMixed)
	if _, err := r.d.Reload(bg); err != nil {
		t.Fatal(err)
	}
	if r.d.MetricsAddr() != "" {
		t.Fatal("metrics still served after the config dropped them")
	}
}

func TestSocket(t *testing.T) {
	r := start(t, simkernel.NewExample(t, "mi25.yaml"), "")
	fi, err := os.Stat(r.socket)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode: %v, %v", fi.Mode(), err)
	}
	// A second vgpud on the same state fails fast on the ledger lock.
	start := time.Now()
	_, err = New(Options{ConfigPath: r.cfgPath, FS: r.k, StateDir: r.stateDir, SocketPath: r.socket + "2"})
	if !errors.Is(err, ledger.ErrLocked) || time.Since(start) > 5*time.Second {
		t.Fatalf("second vgpud: %v after %s", err, time.Since(start))
	}
	// A live socket is not taken over.
	if _, err := listenUnix(r.socket, enginetest.Logger()); err == nil || !strings.Contains(err.Error(), "another process answers") {
		t.Fatalf("listen on a live socket: %v", err)
	}
	// A stale one (its server gone) is replaced.
	stale := filepath.Join(filepath.Dir(r.socket), "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ln, err = listenUnix(stale, enginetest.Logger())
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	ln.Close()
	// A group that does not exist: root only.
	if err := setSocketAccess(stale, "no-such-group", lookupGroup, enginetest.Logger()); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(stale); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode without the group: %v", fi.Mode())
	}
	r.stop()
	if _, err := os.Stat(r.socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after stop: %v", err)
	}
}

// TestSystemdNotify binds a NOTIFY_SOCKET as systemd would and watches
// READY, WATCHDOG and STOPPING arrive.
func TestSystemdNotify(t *testing.T) {
	dir := shortTemp(t)
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "100000") // 100ms: pings every 50ms
	t.Setenv("WATCHDOG_PID", fmt.Sprint(os.Getpid()))
	r := start(t, simkernel.NewExample(t, "mi25.yaml"), "version: v1\ngpus:\n  - address: \"0000:03:00.0\"\n    profile: mi25-4g\n")
	got := map[string]int{}
	read := func(until string) {
		t.Helper()
		buf := make([]byte, 256)
		deadline := time.Now().Add(5 * time.Second)
		for got[until] == 0 {
			_ = conn.SetReadDeadline(deadline)
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatalf("waiting for %s (got %v): %v", until, got, err)
			}
			got[strings.TrimSpace(string(buf[:n]))]++
		}
	}
	read("READY=1")
	if got["WATCHDOG=1"] > 0 {
		t.Fatal("WATCHDOG before READY")
	}
	for got["WATCHDOG=1"] < 3 {
		read("WATCHDOG=1")
		delete(got, "WATCHDOG=1")
		got["pings"]++
		if got["pings"] == 3 {
			break
		}
	}
	r.stop()
	read("STOPPING=1")
}

// TestConcurrentReserveUnreserve races 200 reserve/unreserve calls from a
// pool of goroutines through the client for 16 vGPUs.
func TestConcurrentReserveUnreserve(t *testing.T) {
	r := start(t, simkernel.NewExample(t, "mi25.yaml"), "version: v1\ngpus:\n  - address: \"0000:03:00.0\"\n    profile: mi25-1g\n")
	const calls = 200
	race := clienttest.RaceReserve(r.c, client.ErrNoCapacity, "mi25-1g", calls, 24, time.Millisecond)
	if len(race.Errs) > 0 || race.Doubles != 0 || race.Reserved == 0 || race.Reserved+race.Full != calls {
		t.Fatalf("doubles %d, reserved %d, refused for capacity %d, errors %v", race.Doubles, race.Reserved, race.Full, race.Errs)
	}
	if as := r.allocations(); len(as) != 0 {
		t.Fatalf("leaked allocations: %+v", as)
	}
	vs, _ := r.c.VGPUs(bg)
	if n := countBy(vs, func(v api.VGPU) string { return v.State })["free"]; n != 16 {
		t.Fatalf("%d free vGPUs at the end, want 16", n)
	}
	t.Logf("%d reserved, %d refused for capacity", race.Reserved, race.Full)
}
