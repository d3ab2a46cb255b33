package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/internal/unixhttp"
)

// syncWriter lets the test read what the daemon's goroutines write.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: v1\nonRelease: keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	emptyState := filepath.Join(dir, "empty-state")
	if err := os.MkdirAll(emptyState, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(emptyState, "ledger.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"empty ledger", []string{"--config", bad + "-missing", "--state-dir", emptyState, "--socket", filepath.Join(dir, "s")}, exitFailed, "the file is empty (0 bytes"},
		{"bad config", []string{"--config", bad, "--state-dir", dir, "--socket", filepath.Join(dir, "s")}, exitUsage, "onRelease: unknown field"},
		{"bad catalog", []string{"--config", bad + "-missing", "--profiles", "../vgpuctl/testdata/bad-catalog", "--state-dir", dir}, exitUsage, "profile catalog"},
		{"bad log format", []string{"--log-format", "xml"}, exitUsage, "allowed: text, json"},
		{"bad log level", []string{"--log-level", "loud"}, exitUsage, "allowed: debug"},
		{"remote libvirt", []string{"--libvirt-uri", "qemu+ssh://host/system"}, exitUsage, "vgpud watches the local system libvirt"},
		{"unknown flag", []string{"--nope"}, exitUsage, "flag provided but not defined"},
		{"arguments", []string{"serve"}, exitUsage, "unexpected arguments"},
		{"help", []string{"-h"}, exitOK, "Exit codes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := run(context.Background(), tc.args, &out, nil)
			if code != tc.code || !strings.Contains(out.String(), tc.msg) {
				t.Fatalf("exit %d, output:\n%s\nwant exit %d with %q", code, out.String(), tc.code, tc.msg)
			}
		})
	}
}

// TestMissingConfigServes: no config file means no GPU managed, not an error;
// the daemon stops cleanly when its context ends.
func TestMissingConfigServes(t *testing.T) {
	dir, err := os.MkdirTemp("", "vgpud")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sysroot := filepath.Join(dir, "root")
	for _, d := range []string{"sys/bus/pci/devices", "sys/class/mdev_bus", "sys/bus/mdev/devices", "dev/vfio"} {
		if err := os.MkdirAll(filepath.Join(sysroot, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--config", filepath.Join(dir, "none.yaml"), "--sysfs-root", sysroot,
			"--state-dir", filepath.Join(dir, "state"), "--socket", filepath.Join(dir, "vgpud.sock")}, &syncWriter{w: &out}, nil)
	}()
	sock := filepath.Join(dir, "vgpud.sock")
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if i > 500 {
			t.Fatal("no socket after 5s")
		}
		select {
		case code := <-done:
			t.Fatalf("vgpud exited %d", code)
		default:
		}
		time.Sleep(10 * time.Millisecond)
	}
	// vgpud keeps its Prometheus metrics (the engine alone records none).
	var page string
	for i := 0; !strings.Contains(page, "vgpu_reconcile_drift") && i < 500; i++ {
		time.Sleep(10 * time.Millisecond)
		resp, err := unixhttp.NewClient(sock).Get("http://vgpud/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page = string(b)
	}
	for _, want := range []string{"vgpu_reconcile_drift", "go_goroutines"} {
		if !strings.Contains(page, want) {
			t.Errorf("vgpud's /metrics lacks %s:\n%s", want, page)
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d", code)
	}
}
