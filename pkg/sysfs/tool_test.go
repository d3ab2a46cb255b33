package sysfs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// TestOSRunTool: a tool is found at its install path under Root, or where
// Tools says; a failure is one error holding the tool's last line.
func TestOSRunTool(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	o := sysfs.NewOS(root)
	if _, err := o.RunTool(ctx, sysfs.ToolSriovManage, "-e", "0000:41:00.0"); err == nil ||
		!strings.Contains(err.Error(), filepath.Join(root, "usr/lib/nvidia/sriov-manage")) {
		t.Fatalf("missing tool: err = %v, want the path under the root", err)
	}
	if _, err := o.RunTool(ctx, "rocm-smi"); !errors.Is(err, sysfs.ErrNoTool) {
		t.Fatalf("unknown tool: err = %v", err)
	}
	script := filepath.Join(root, "fake")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"args $*\"\necho 'Cannot obtain unbindLock for '$2 >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	o.Tools = map[string]string{sysfs.ToolSriovManage: script}
	out, err := o.RunTool(ctx, sysfs.ToolSriovManage, "-e", "0000:41:00.0")
	if err == nil || !strings.HasSuffix(err.Error(), "exit status 3: Cannot obtain unbindLock for 0000:41:00.0") {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(string(out), "args -e 0000:41:00.0") {
		t.Fatalf("output %q", out)
	}
	if _, err := sysfs.RunTool(ctx, nopFS{}, sysfs.ToolSriovManage); !errors.Is(err, sysfs.ErrNoTool) {
		t.Fatalf("FS without tools: err = %v", err)
	}
}

// nopFS is an FS that cannot run tools.
type nopFS struct{ sysfs.FS }
