package fusefs

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serveControl serves the control API of a fresh mount on a unix socket.
func serveControl(t *testing.T) (*Client, string) {
	t.Helper()
	k, m, mnt := mountHost(t)
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: NewControl(k, m, "test host")}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	c := NewClient(sock)
	t.Cleanup(c.Close)
	return c, mnt
}

func TestControlFaults(t *testing.T) {
	c, mnt := serveControl(t)
	ctx := context.Background()
	numvfs := dev(mi25, "sriov_numvfs")

	st, err := c.Status(ctx)
	if err != nil || st.Mount != mnt || st.Host != "test host" {
		t.Fatalf("status = %+v, %v", st, err)
	}
	r, err := c.Inject(ctx, FaultRequest{Path: numvfs, Nth: 2, Errno: "EBUSY"})
	if err != nil || r.Kind != KindFail || r.ID == 0 {
		t.Fatalf("inject = %+v, %v", r, err)
	}
	mustWrite(t, mnt, numvfs, "1")
	if err := writeMnt(mnt, numvfs, "1"); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("second write: %v, want EBUSY", err)
	}
	mustWrite(t, mnt, numvfs, "1")
	if n, err := c.Writes(ctx, numvfs); err != nil || n != 3 {
		t.Fatalf("writes = %d, %v; want 3", n, err)
	}

	// Always, then cleared.
	if _, err := c.Inject(ctx, FaultRequest{Path: numvfs, Errno: "5", Always: true}); err != nil {
		t.Fatal(err)
	}
	if err := writeMnt(mnt, numvfs, "1"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write under an always fault: %v, want EIO", err)
	}
	if _, err := c.ClearFaults(ctx); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, mnt, numvfs, "1")
}

func TestControlHold(t *testing.T) {
	c, mnt := serveControl(t)
	ctx := context.Background()
	numvfs := dev(mi25, "sriov_numvfs")
	if _, err := c.Inject(ctx, FaultRequest{Kind: KindHold, Path: numvfs}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- writeMnt(mnt, numvfs, "2") }()
	for {
		hs, err := c.Holds(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) == 1 && hs[0].Waiting == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if n, err := c.ClearFaults(ctx); err != nil || n != 1 {
		t.Fatalf("clear released %d, %v; want 1", n, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("write released by DELETE /faults: %v", err)
	}
	if got := readMnt(t, mnt, numvfs); got != "2\n" {
		t.Fatalf("sriov_numvfs = %q", got)
	}
}

func TestControlOpens(t *testing.T) {
	c, mnt := serveControl(t)
	ctx := context.Background()
	f, err := os.Open(filepath.Join(mnt, "/dev/vfio/vfio"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := c.Opens(ctx, "/dev/vfio/vfio"); err != nil || n != 1 {
		t.Fatalf("opens = %d, %v; want 1", n, err)
	}
}

func TestControlRejectsBadRequests(t *testing.T) {
	c, _ := serveControl(t)
	ctx := context.Background()
	tests := []struct {
		req  FaultRequest
		want string
	}{
		{FaultRequest{Path: "sys/x"}, "absolute host path"},
		{FaultRequest{Path: "/sys/x", Errno: "EWHAT"}, `errno "EWHAT": unknown name`},
		{FaultRequest{Path: "/sys/x", Errno: "0"}, "not a Linux errno"},
		{FaultRequest{Path: "/sys/x", Kind: "explode"}, `unknown kind "explode"`},
		{FaultRequest{Path: "/sys/x", Kind: KindHold, Errno: "EIO"}, "errno belongs to the release"},
		{FaultRequest{Path: "/sys/x", Nth: -1}, "negative"},
	}
	for _, tt := range tests {
		_, err := c.Inject(ctx, tt.req)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("inject %+v: %v, want an error containing %q", tt.req, err, tt.want)
		}
	}
	if _, err := c.Writes(ctx, "relative"); err == nil {
		t.Error("writes with a relative path: no error")
	}
}

func TestParseErrno(t *testing.T) {
	tests := []struct {
		in   string
		want syscall.Errno
		ok   bool
	}{
		{"", syscall.EIO, true},
		{"EBUSY", syscall.EBUSY, true},
		{"enospc", syscall.ENOSPC, true},
		{"16", syscall.EBUSY, true},
		{"EFOO", 0, false},
		{"-1", 0, false},
		{"99999", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseErrno(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseErrno(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
