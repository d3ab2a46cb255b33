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

// TestImport: vgpuctl import prints a config apply takes, names on stderr
// what it leaves out (exit 1), and refuses bad input (exit 2).
func TestImport(t *testing.T) {
	c := newCLI(t, "mixed.yaml")
	dir := mdevctltest.Dir(t, map[string][]byte{
		"0000:3b:00.0/" + mdevctlT4:                         mdevctltest.Fixture(t, "debian-define/"+mdevctlT4),
		"0000:99:00.0/a1b2c3d4-0000-4000-8000-000000000001": []byte(`{"mdev_type": "nvidia-232", "start": "auto"}`),
	})
	out, errs, code := c.run("--mdevctl-dir", dir, "import", "mdevctl")
	if code != exitFailed || !strings.Contains(out, "  - address: \"0000:3b:00.0\"\n    profile: t4-4q\n") ||
		!strings.Contains(errs, "vgpuctl: not imported: 0000:99:00.0: not on this host") || !strings.Contains(errs, "vgpuctl: 1 not imported") {
		t.Fatalf("import mdevctl: exit %d\n%s\n%s", code, out, errs)
	}
	cfg := filepath.Join(t.TempDir(), "imported.yaml")
	if err := os.WriteFile(cfg, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	// The config is what vgpud takes once mdevctl lets go of the T4.
	if _, errs, code := c.run("--mdevctl-dir", dir, "apply", "-f", cfg, "--dry-run"); code != exitUsage || !strings.Contains(errs, "mdevctl starts mdevs on 0000:3b:00.0") {
		t.Fatalf("apply of the import while mdevctl starts the T4's mdev: exit %d, %s", code, errs)
	}
	if out := c.ok("apply", "-f", cfg, "--dry-run"); !strings.Contains(out, "0000:3b:00.0  t4-4q") {
		t.Fatalf("apply --dry-run of the import:\n%s", out)
	}
	out = c.ok("--mdevctl-dir", dir, "import", "mdevctl", "--parent", "0000:3b:00.0", "-o", "json")
	if !strings.Contains(out, `"profile": "t4-4q"`) || !strings.Contains(out, `"config": "# vgpud host config`) {
		t.Fatalf("import mdevctl -o json:\n%s", out)
	}
	if _, errs, code := c.run("--mdevctl-dir", dir, "import", "mdevctl", "--parent", "0000:86:00.0"); code != exitUsage || !strings.Contains(errs, "no mdevctl definitions for 0000:86:00.0") {
		t.Fatalf("import mdevctl --parent without definitions: exit %d, %s", code, errs)
	}
	if _, errs, code := c.run("import", "mdevctl"); code != exitUsage || !strings.Contains(errs, "give --mdevctl-dir") {
		t.Fatalf("import mdevctl without a directory: exit %d, %s", code, errs)
	}

	example := filepath.Join("..", "..", "pkg", "vgpudm", "testdata", "config-t4.yaml")
	if out := c.ok("import", "vgpu-device-manager", example, "--config", "T4-4Q"); !strings.Contains(out, "  - all: true\n    profile: t4-4q\n") {
		t.Fatalf("import vgpu-device-manager --config T4-4Q:\n%s", out)
	}
	if _, errs, code := c.run("import", "vgpu-device-manager", example); code != exitUsage || !strings.Contains(errs, "has 8 vgpu-configs; name one (--config NAME)") {
		t.Fatalf("import vgpu-device-manager without --config: exit %d, %s", code, errs)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := c.run("import", "vgpu-device-manager", bad); code != exitUsage || !strings.Contains(errs, bad+":1: version: unknown version v2") {
		t.Fatalf("import of a bad file: exit %d, %s", code, errs)
	}
}
