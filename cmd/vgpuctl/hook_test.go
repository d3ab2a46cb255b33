package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runHookCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runVgpuctl(args, env{})
}

func TestHookInstall(t *testing.T) {
	dir := t.TempDir()
	hooks := filepath.Join(dir, "hooks")
	bin := filepath.Join(dir, "vgpu-hook")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(hooks, "qemu.d", "vgpu")
	check := func(want string) {
		t.Helper()
		b, err := os.ReadFile(dst)
		fi, serr := os.Stat(dst)
		if err != nil || serr != nil || string(b) != want || fi.Mode().Perm() != 0o755 {
			t.Fatalf("%s: %q, %v, %v", dst, b, err, fi.Mode())
		}
		left, _ := filepath.Glob(filepath.Join(hooks, "qemu.d", ".*"))
		if len(left) > 0 {
			t.Fatalf("temporary files left: %v", left)
		}
	}

	out, errs, code := runHookCmd(t, "hook", "install", "--hooks-dir", hooks, "--hook-binary", bin)
	if code != 0 || errs != "" || !strings.HasPrefix(out, "installed "+bin+" as "+dst+"\n") {
		t.Fatalf("install: exit %d, %q, %q", code, out, errs)
	}
	check("#!/bin/sh\nexit 0\n")

	out, _, code = runHookCmd(t, "hook", "install", "--hooks-dir", hooks, "--hook-binary", bin)
	if code != 0 || out != dst+" is up to date\n" {
		t.Fatalf("second install: exit %d, %q", code, out)
	}

	// A new build replaces the old one; a wrong mode is repaired.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, code = runHookCmd(t, "hook", "install", "--hooks-dir", hooks, "--hook-binary", bin); code != 0 {
		t.Fatal("upgrade failed")
	}
	check("#!/bin/sh\nexit 1\n")
	if err := os.Chmod(dst, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _, _ = runHookCmd(t, "hook", "install", "--hooks-dir", hooks, "--hook-binary", bin); !strings.HasPrefix(out, "installed") {
		t.Fatalf("mode repair: %q", out)
	}
	check("#!/bin/sh\nexit 1\n")

	out, _, code = runHookCmd(t, "hook", "uninstall", "--hooks-dir", hooks)
	if code != 0 || out != "removed "+dst+"\n" {
		t.Fatalf("uninstall: exit %d, %q", code, out)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("%s still there: %v", dst, err)
	}
	out, _, code = runHookCmd(t, "hook", "uninstall", "--hooks-dir", hooks)
	if code != 0 || out != dst+" is not installed; nothing to do\n" {
		t.Fatalf("second uninstall: exit %d, %q", code, out)
	}
}

func TestHookInstallRefuses(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "vgpu-hook")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"missing binary", []string{"--hook-binary", filepath.Join(dir, "nope")}, "read the hook binary " + filepath.Join(dir, "nope") + ": "},
		// The test binary has no vgpu-hook beside it.
		{"not beside vgpuctl", nil, "(pass --hook-binary)"},
		{"not executable", []string{"--hook-binary", notExec}, "is not executable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"hook", "install", "--hooks-dir", filepath.Join(dir, "hooks")}, tc.args...)
			_, errs, code := runHookCmd(t, args...)
			if code != exitFailed || !strings.Contains(errs, tc.msg) {
				t.Fatalf("exit %d, %q; want %q", code, errs, tc.msg)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "hooks", "qemu.d", "vgpu")); !os.IsNotExist(err) {
		t.Fatal("a refused install left a hook")
	}
}
