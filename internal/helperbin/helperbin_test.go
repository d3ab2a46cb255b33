package helperbin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFind: a helper next to the executable (a build tree's bin/) wins
// over one in ../libexec/vgpu (make install); a file that is not
// executable does not count; the environment overrides both; with none,
// the error lists the two places and the variable.
func TestFind(t *testing.T) {
	root := t.TempDir()
	bin, libexec := filepath.Join(root, "bin"), filepath.Join(root, "libexec", "vgpu")
	for _, d := range []string{bin, libexec} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	_, err := findIn(bin, "vgpu-nvml", "VGPU_NVML_HELPER")
	var nf *NotFoundError
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), filepath.Join(bin, "vgpu-nvml")) ||
		!strings.Contains(err.Error(), filepath.Join(bin, "..", "libexec", "vgpu", "vgpu-nvml")) || !strings.Contains(err.Error(), "VGPU_NVML_HELPER") {
		t.Fatalf("none installed: err = %v", err)
	}
	write(filepath.Join(bin, "vgpu-nvml"), 0o644) // not executable
	write(filepath.Join(libexec, "vgpu-nvml"), 0o755)
	if p, err := findIn(bin, "vgpu-nvml", "X"); err != nil || p != filepath.Join(bin, "..", "libexec", "vgpu", "vgpu-nvml") {
		t.Fatalf("installed in libexec: %q, %v", p, err)
	}
	if err := os.Chmod(filepath.Join(bin, "vgpu-nvml"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := findIn(bin, "vgpu-nvml", "X"); err != nil || p != filepath.Join(bin, "vgpu-nvml") {
		t.Fatalf("next to the executable: %q, %v", p, err)
	}
	t.Setenv("VGPU_TEST_HELPER", "/opt/h")
	if p, err := Find("vgpu-nvml", "VGPU_TEST_HELPER"); err != nil || p != "/opt/h" {
		t.Fatalf("from the environment: %q, %v", p, err)
	}
}
