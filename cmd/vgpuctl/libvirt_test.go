package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// buildAs builds this package into path with cgo on or off, as make build does.
func buildAs(t *testing.T, path string, cgo bool) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", path, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if cgo {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -o %s (cgo %v): %v\n%s", path, cgo, err, out)
	}
}

func imported(t *testing.T, path string) []string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatalf("read the shared libraries %s needs: %v", path, err)
	}
	return libs
}

// The static vgpuctl links nothing and hands attach to vgpuctl-libvirt,
// found next to it or through VGPUCTL_LIBVIRT; without it attach fails
// saying where it looked.
func TestStaticBuildHandsLibvirtToItsCgoBuild(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go tool on PATH")
	}
	dir := t.TempDir()
	static, helper := filepath.Join(dir, "vgpuctl"), filepath.Join(dir, "vgpuctl-libvirt")
	buildAs(t, static, false)
	buildAs(t, helper, true)
	if libs := imported(t, static); len(libs) != 0 {
		t.Fatalf("static vgpuctl needs %v", libs)
	}
	if libs := imported(t, helper); !slices.Contains(libs, "libvirt.so.0") {
		t.Fatalf("vgpuctl-libvirt needs %v, not libvirt.so.0", libs)
	}
	// Nor does it link what only vgpud (metrics) or the man pages use:
	// their package set-up would cost every command's start.
	deps, err := exec.Command("go", "version", "-m", static).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m %s: %v\n%s", static, err, deps)
	}
	for _, heavy := range []string{"prometheus", "protobuf", "blackfriday", "md2man"} {
		if strings.Contains(string(deps), heavy) {
			t.Errorf("static vgpuctl links %s:\n%s", heavy, deps)
		}
	}
	// The man pages come from the helper, through the static build.
	man := filepath.Join(dir, "man")
	if out, err := exec.Command(static, "man", man).CombinedOutput(); err != nil {
		t.Fatalf("vgpuctl man through vgpuctl-libvirt: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(man, "vgpuctl-carve.1")); err != nil {
		t.Fatalf("vgpuctl man wrote no vgpuctl-carve.1: %v", err)
	}

	attach := func(env ...string) (string, int) {
		cmd := exec.Command(static, "--socket", filepath.Join(dir, "none.sock"), "attach", "test", "--profile", "t4-4q", "-c", "test:///default")
		cmd.Env = append(os.Environ(), libvirtHelperEnv+"=")
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	if out, code := attach(); code != 0 || !strings.Contains(out, "attached 1 x t4-4q to test (config)") {
		t.Fatalf("attach through the sibling vgpuctl-libvirt: exit %d\n%s", code, out)
	}
	moved := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Rename(helper, moved); err != nil {
		t.Fatal(err)
	}
	if out, code := attach(); code != exitFailed || !strings.Contains(out, "run in vgpuctl-libvirt") || !strings.Contains(out, helper) {
		t.Fatalf("attach without vgpuctl-libvirt: exit %d, want %d and where it looked\n%s", code, exitFailed, out)
	}
	if out, code := attach(libvirtHelperEnv + "=" + moved); code != 0 || !strings.Contains(out, "attached 1 x t4-4q") {
		t.Fatalf("attach with %s=%s: exit %d\n%s", libvirtHelperEnv, moved, code, out)
	}
	// Bad input is refused by the static build itself, before any exec.
	cmd := exec.Command(static, "attach", "test", "--count", "0", "--profile", "t4-4q")
	cmd.Env = append(os.Environ(), libvirtHelperEnv+"=/nonexistent")
	if out, err := cmd.CombinedOutput(); !strings.Contains(string(out), "--count 0") {
		t.Fatalf("attach --count 0: %v\n%s", err, out)
	}
}
