package watch

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestNewMonitorURIs: the local system libvirt, with or without a socket
// of its own; anything else is refused naming the URI.
func TestNewMonitorURIs(t *testing.T) {
	m, err := NewMonitor("qemu:///system", quiet)
	if err != nil || strings.Join(m.sockets, " ") != libvirtdSocketRO+" "+virtqemudSocketRO {
		t.Fatalf("qemu:///system: %v, sockets %v", err, m)
	}
	m, err = NewMonitor("qemu:///system?socket=/tmp/x/libvirt-sock", quiet)
	if err != nil || len(m.sockets) != 1 || m.sockets[0] != "/tmp/x/libvirt-sock" {
		t.Fatalf("with ?socket: %v, %+v", err, m)
	}
	for _, bad := range []string{"qemu:///session", "qemu+ssh://host/system", "test:///default", "xen:///system", "qemu://host/system", "%zz"} {
		if _, err := NewMonitor(bad, quiet); err == nil || !strings.Contains(err.Error(), "libvirt URI") {
			t.Errorf("%s: %v, want a refusal naming the URI", bad, err)
		}
	}
}

// TestNotConnected: before Run connects, Domains fails (the caller must
// conclude nothing) and says why.
func TestNotConnected(t *testing.T) {
	m, _ := NewMonitor("qemu:///system?socket=/nonexistent/sock", quiet)
	if _, err := m.Domains(context.Background()); !errors.Is(err, ErrNotConnected) || !strings.Contains(err.Error(), "qemu:///system") {
		t.Fatalf("Domains before connecting: %v", err)
	}
}

// TestConnectFailures: no socket at all, and a socket whose peer is no
// libvirtd, each fail the attempt with the socket named; Run keeps trying
// until its context ends.
func TestConnectFailures(t *testing.T) {
	dir := t.TempDir()
	m, _ := NewMonitor("qemu:///system?socket="+filepath.Join(dir, "none"), quiet)
	if _, _, err := m.connect(context.Background()); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "none") {
		t.Fatalf("connect without a socket: %v", err)
	}
	// A listener that hangs up at once, as a daemon going away does.
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	m, _ = NewMonitor("qemu:///system?socket="+sock, quiet)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := m.connect(ctx); err == nil || !strings.Contains(err.Error(), sock) {
		t.Fatalf("connect to a peer that hangs up: %v", err)
	}
	m.retry = 10 * time.Millisecond
	rctx, rcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer rcancel()
	if err := m.Run(rctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := m.Domains(context.Background()); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Domains after a Run that never connected: %v", err)
	}
}

func TestUUIDString(t *testing.T) {
	u := golibvirt.UUID{0x4d, 0xea, 0x22, 0xb3, 0x1d, 0x52, 0xd8, 0xf3, 0x25, 0x16, 0x78, 0x2e, 0x98, 0xab, 0x3f, 0xa0}
	if got := uuidString(u); got != "4dea22b3-1d52-d8f3-2516-782e98ab3fa0" {
		t.Fatalf("uuidString = %s", got)
	}
}

// TestCallHonoursContext: a request that does not answer gives way to
// the context.
func TestCallHonoursContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	block := make(chan struct{})
	defer close(block)
	if _, err := call(ctx, func() (int, error) { <-block; return 1, nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call past its context: %v", err)
	}
}
