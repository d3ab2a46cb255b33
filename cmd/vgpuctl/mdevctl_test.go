package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/mdevctl/mdevctltest"
)

const mdevctlT4 = "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44"

// TestMdevctlRefusedWithoutVgpud: vgpuctl working on the host itself
// refuses, as vgpud does, an apply, assert or carve that would manage a
// GPU on which mdevctl starts mdevs (exit 2, nothing changed), and lets a
// GPU mdevctl leaves alone be carved.
func TestMdevctlRefusedWithoutVgpud(t *testing.T) {
	c := newCLI(t, "mixed.yaml")
	dir := mdevctltest.Dir(t, map[string][]byte{"0000:3b:00.0/" + mdevctlT4: mdevctltest.Fixture(t, "debian-define/"+mdevctlT4)})
	cfgPath := filepath.Join(c.state, "etc", "config.yaml")
	before, err := sysfstest.Snapshot(c.k)
	if err != nil {
		t.Fatal(err)
	}
	want := "testdata/config-mixed.yaml:6: gpus[1]: mdevctl starts mdevs on 0000:3b:00.0 when it appears (start auto in " +
		filepath.Join(dir, "0000:3b:00.0") + ": " + mdevctlT4 + ")"
	for _, args := range [][]string{
		{"apply", "-f", "testdata/config-mixed.yaml", "--config", cfgPath},
		{"apply", "-f", "testdata/config-mixed.yaml", "--dry-run"},
		{"assert", "-f", "testdata/config-mixed.yaml"},
	} {
		_, errs, code := c.run(append([]string{"--mdevctl-dir", dir}, args...)...)
		if code != exitUsage || !strings.Contains(errs, want) {
			t.Errorf("vgpuctl %s: exit %d, %q; want 2 and\n%s", strings.Join(args, " "), code, errs, want)
		}
	}
	_, errs, code := c.run("--mdevctl-dir", dir, "carve", "0000:3b:00.0", "--profile", "t4-4q")
	if code != exitUsage || !strings.Contains(errs, "vgpuctl: mdevctl starts mdevs on 0000:3b:00.0") ||
		!strings.Contains(errs, "vgpuctl import mdevctl --parent 0000:3b:00.0") {
		t.Errorf("carve of the T4: exit %d, %q", code, errs)
	}
	if _, err := os.Stat(cfgPath); !os.IsNotExist(err) {
		t.Errorf("a refused apply wrote %s: %v", cfgPath, err)
	}
	after, err := sysfstest.Snapshot(c.k)
	if err != nil {
		t.Fatal(err)
	}
	if d := sysfstest.Diff(before, after); d != "" {
		t.Errorf("refused changes changed the host:\n%s", d)
	}
	c.ok("--mdevctl-dir", dir, "carve", "0000:03:00.0", "--profile", "mi25-4g")
}
