package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/internal/sim/kernel/fusefs"
	"github.com/vgpu-project/vgpu/internal/syncbuf"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb syncbuf.Buffer
	code = run(context.Background(), args, env{stdout: &out, stderr: &errb})
	return code, out.String(), errb.String()
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--mount", "/tmp/x"}, "--host is required"},
		{[]string{"serve", "--host", "../../examples/hosts/t4.yaml"}, "--mount is required"},
		{[]string{"serve", "--host", "/nonexistent.yaml", "--mount", "/tmp/x"}, "read host description"},
		{[]string{"serve", "--bogus"}, "unknown flag"},
		{[]string{"fault", "--path", "/sys/x"}, "--control is required"},
		{[]string{"fault", "--control", "/tmp/s"}, "--path is required"},
		{[]string{"fault", "--control", "/tmp/s", "--path", "/sys/x", "--errno", "EWHAT"}, "unknown name"},
		{[]string{"fault", "--control", "/tmp/s", "--path", "/sys/x", "--hold", "--errno", "EIO"}, "--hold takes no --errno"},
		{[]string{"fault", "--control", "/tmp/s", "--clear", "--path", "/sys/x"}, "--clear takes no other"},
		{[]string{"release", "--control", "/tmp/s", "--errno", "nope"}, "unknown name"},
		{[]string{"writes", "--control", "/tmp/s"}, "--path is required"},
		{[]string{"holds", "extra"}, "takes no arguments"},
		{[]string{"bogus"}, `unknown command "bogus" for "vgpusim"`},
	}
	for _, tt := range tests {
		code, _, stderr := runCLI(tt.args...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("vgpusim %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tt.args, " "), code, stderr, tt.want)
		}
	}
}

func TestParseMountinfo(t *testing.T) {
	in := `22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
42 27 0:39 / /tmp/sim\040dir/mnt rw,nosuid,nodev - fuse.vgpusim vgpusim rw,user_id=0
43 27 0:40 / /run/x rw shared:5 master:1 - tmpfs tmpfs rw
garbage line
`
	got, err := parseMountinfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []mountEntry{{"/sys", "sysfs"}, {"/tmp/sim dir/mnt", "fuse.vgpusim"}, {"/run/x", "tmpfs"}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestClearStaleLeavesPlainDirs(t *testing.T) {
	var out bytes.Buffer
	dir := t.TempDir()
	if err := clearStale(dir, &out); err != nil {
		t.Fatalf("clearStale on a plain directory: %v", err)
	}
	if err := clearStale(filepath.Join(dir, "missing"), &out); err != nil {
		t.Fatalf("clearStale on a missing directory: %v", err)
	}
	if out.Len() != 0 {
		t.Fatalf("clearStale said %q about plain directories", out.String())
	}
}

func TestListenControlReplacesStaleSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := listenControl(sock); err == nil || !strings.Contains(err.Error(), "a live process answers") {
		t.Fatalf("listen on a live socket: %v", err)
	}
	// Closing a Go listener unlinks the file; a crashed process leaves it.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ln2, err := listenControl(sock)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	ln2.Close()
	plain := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listenControl(plain); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("listen over a regular file: %v", err)
	}
}

// TestServeInProcess runs serve until its context ends: the mount answers,
// the control socket takes a fault, and stopping unmounts and removes the
// ready file and socket. Needs root and /dev/fuse.
func TestServeInProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("serve mounts a FUSE filesystem: run the tests as root (sudo make test)")
	}
	tmp := t.TempDir()
	mnt, sock, ready := filepath.Join(tmp, "mnt"), filepath.Join(tmp, "ctl.sock"), filepath.Join(tmp, "ready")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--host", "../../examples/hosts/t4.yaml", "--mount", mnt,
			"--control", sock, "--ready-file", ready}, env{stdout: &errb, stderr: &errb})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil && strings.TrimSpace(string(b)) == mnt {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d before ready: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready file after 10s: %s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	numvfs := "/sys/bus/pci/devices/0000:3b:00.0/sriov_totalvfs"
	if s, err := sysfs.ReadString(sysfs.NewOS(mnt), numvfs); err != nil || s != "16" {
		t.Fatalf("read %s through the mount: %q, %v", numvfs, s, err)
	}
	code, out, stderr := runCLI("fault", "--control", sock, "--path", "/sys/bus/pci/devices/0000:3b:00.0/driver_override", "--errno", "EBUSY")
	if code != 0 || !strings.Contains(out, `"kind":"fail"`) {
		t.Fatalf("fault: exit %d, %q %q", code, out, stderr)
	}
	override := "/sys/bus/pci/devices/0000:3b:00.0/driver_override"
	if err := sysfs.WriteString(sysfs.NewOS(mnt), override, "vfio-pci"); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("write under the injected fault: %v, want EBUSY", err)
	}
	c := fusefs.NewClient(sock)
	defer c.Close()
	if n, err := c.Writes(context.Background(), override); err != nil || n != 1 {
		t.Fatalf("writes over the socket: %d, %v; want 1", n, err)
	}
	if code, out, stderr := runCLI("writes", "--control", sock, "--path", override); code != 0 || !strings.Contains(out, `"count":1`) {
		t.Fatalf("vgpusim writes: exit %d, %q %q", code, out, stderr)
	}
	if code, _, stderr := runCLI("fault", "--control", sock, "--clear"); code != 0 {
		t.Fatalf("fault --clear: exit %d, %s", code, stderr)
	}
	if err := sysfs.WriteString(sysfs.NewOS(mnt), override, "\n"); err != nil {
		t.Fatalf("write after --clear: %v", err)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d after stop: %s", code, errb.String())
	}
	for _, p := range []string{ready, sock} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there after stop (%v)", p, err)
		}
	}
	types, err := mountsAt(mnt)
	if err != nil || len(types) != 0 {
		t.Fatalf("mounts at %s after stop: %v, %v", mnt, types, err)
	}
}
