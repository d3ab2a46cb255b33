package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/attach"
	"github.com/vgpu-project/vgpu/pkg/client/clienttest"
	"github.com/vgpu-project/vgpu/pkg/daemon/daemontest"
)

func TestApplyAssertWithoutVgpud(t *testing.T) {
	c := newCLI(t, "mixed.yaml")
	cfgPath := filepath.Join(c.state, "etc", "config.yaml")
	out, _, code := c.run("assert", "-f", "testdata/config-mixed.yaml")
	if code != exitFailed {
		t.Fatalf("assert before apply: exit %d", code)
	}
	golden(t, "assert-drift", out)
	golden(t, "apply", c.ok("apply", "-f", "testdata/config-mixed.yaml", "--config", cfgPath))
	golden(t, "assert-match", c.ok("assert", "-f", "testdata/config-mixed.yaml"))
	if b, err := os.ReadFile(cfgPath); err != nil || !bytes.Contains(b, []byte("t4-4q")) {
		t.Fatalf("apply did not write the config to --config: %v", err)
	}
	if out := c.ok("apply", "-f", "testdata/config-mixed.yaml", "--config", cfgPath); !strings.Contains(out, "0 changed") {
		t.Fatalf("apply again:\n%s", out)
	}
	// A config for GPUs this host lacks: exit 2, nothing written.
	bad := filepath.Join(c.state, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: v1\ngpus:\n  - address: \"0000:99:00.0\"\n    profile: mi25-4g\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"apply", "assert"} {
		_, errs, code := c.run(verb, "-f", bad, "--config", cfgPath)
		if verb == "assert" {
			_, errs, code = c.run(verb, "-f", bad)
		}
		if code != exitUsage || !strings.Contains(errs, "no GPU at 0000:99:00.0") {
			t.Fatalf("%s of a config for another host: exit %d, %q", verb, code, errs)
		}
	}
	if _, _, code := c.run("apply"); code != exitUsage {
		t.Fatalf("apply without -f: exit %d", code)
	}
}

// TestWithVgpud runs a vgpud in process on the same fake kernel: vgpuctl
// finds it on --socket and goes through its API.
func TestWithVgpud(t *testing.T) {
	c := newCLI(t, "mixed.yaml")
	v := daemontest.Start(t, c.k, "")
	dir, sock, cl := v.Dir, v.Socket, v.Client
	run := func(args ...string) (string, string, int) {
		return c.through(sock, append([]string{"--state-dir", filepath.Join(dir, "nope")}, args...)...)
	}
	ok := func(args ...string) string {
		out, errs, code := run(args...)
		if code != 0 {
			t.Fatalf("vgpuctl %v: exit %d: %s", args, code, errs)
		}
		return out
	}
	// A config that does not fit the host: the error names the admin's file,
	// not vgpud's own config path.
	misfit := filepath.Join(t.TempDir(), "misfit.yaml")
	if err := os.WriteFile(misfit, []byte("version: v1\ngpus:\n  - address: \"0000:99:00.0\"\n    profile: mi25-4g\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"apply", "assert"} {
		_, errs, code := run(cmd, "-f", misfit)
		out, _, _ := run(cmd, "-f", misfit, "-o", "json")
		if code == 0 || (!strings.Contains(errs, misfit) && !strings.Contains(out, misfit)) || strings.Contains(errs+out, filepath.Join(dir, "config.yaml")) {
			t.Errorf("%s -f %s through vgpud: exit %d, %q %q; want an error naming %s", cmd, misfit, code, errs, out, misfit)
		}
	}
	golden(t, "vgpud-apply", ok("apply", "-f", "testdata/config-mixed.yaml"))
	if _, err := os.Stat(filepath.Join(dir, "config.yaml")); err != nil {
		t.Fatalf("vgpud did not write its config: %v", err)
	}
	ok("assert", "-f", "testdata/config-mixed.yaml")
	res := attach.VgpudReserver{Client: cl}
	got, err := res.Reserve(context.Background(), "4dea22b3-1d52-d8f3-2516-782e98ab3fa0", "web01", "mi25-4g", 1)
	if err != nil || len(got) != 1 || got[0].Address.String() != "0000:03:00.1" {
		t.Fatalf("reserve through vgpud: %+v, %v", got, err)
	}
	golden(t, "vgpud-vgpus", ok("vgpus"))
	// Carve through the API: the reserved VF refuses an uncarve (exit 3).
	_, errs, code := run("uncarve", "0000:03:00.0")
	if code != exitInUse || !strings.Contains(errs, "reserved for domain web01") {
		t.Fatalf("uncarve of a GPU with a reservation through vgpud: exit %d, %q", code, errs)
	}
	if rel, err := res.Release(context.Background(), "4dea22b3-1d52-d8f3-2516-782e98ab3fa0", []string{"0000:03:00.1", "0000:03:00.2"}); err != nil ||
		len(rel) != 1 || rel[0] != "0000:03:00.1" {
		t.Fatalf("release through vgpud = %v, %v; want 0000:03:00.1 only (03:00.2 is not held)", rel, err)
	}
	golden(t, "vgpud-carve-l40s", ok("carve", "0000:86:00.0", "-p", "l40s-12q"))
	if _, _, code := run("carve", "0000:86:00.0", "-p", "l40s-5q"); code != exitUsage {
		t.Fatalf("carve with an unknown profile through vgpud: exit %d", code)
	}
	// A virtual mdev parent goes through vgpud too (its catalog, its
	// ledger): never around it into a state directory of vgpuctl's own.
	for _, args := range [][]string{{"carve", "mbochs", "-p", "lab-mbochs-64m"}, {"uncarve", "mbochs"}} {
		_, errs, code := run(args...)
		if _, err := os.Stat(filepath.Join(dir, "nope")); err == nil {
			t.Fatalf("vgpuctl %v went around vgpud into its own state directory", args)
		}
		if args[0] == "carve" && (code != exitUsage || !strings.Contains(errs, `unknown profile "lab-mbochs-64m"`)) {
			t.Errorf("vgpuctl %v through vgpud: exit %d, %s; want vgpud's catalog's answer", args, code, errs)
		}
		if args[0] == "uncarve" && (code != exitUsage || !strings.Contains(errs, "mbochs")) {
			t.Errorf("vgpuctl %v through vgpud: exit %d, %s; want vgpud's answer: no such parent", args, code, errs)
		}
	}
}

// TestReleaseNothingHeld: releasing a domain the ledger holds nothing for
// is success with one answer, "held nothing", whether it is named by name
// or by UUID, through vgpud or without it; a held domain is freed by name.
func TestReleaseNothingHeld(t *testing.T) {
	const labA = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
	c := newCLI(t, "mixed.yaml")
	v := daemontest.Start(t, c.k, "version: v1\ngpus:\n  - address: \"0000:3b:00.0\"\n    profile: t4-4q\n")
	through := func(args ...string) (string, string, int) {
		return c.through(v.Socket, args...)
	}
	if _, err := (attach.VgpudReserver{Client: v.Client}).Reserve(context.Background(), labA, "labA", "t4-4q", 1); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := through("release", "labA"); code != 0 || !strings.Contains(out, "freed ") || errs != "" {
		t.Fatalf("release labA: exit %d, %q %q", code, out, errs)
	}
	for name, run := range map[string]func(...string) (string, string, int){"through vgpud": through, "without vgpud": c.run} {
		for _, who := range []string{"labA", labA, "nosuch01"} {
			out, errs, code := run("release", who)
			if code != 0 || errs != "" || out != "domain "+who+" held nothing: the ledger has no vGPU or lease of it (vgpuctl vgpus lists who holds what)\n" {
				t.Errorf("release %s %s, which holds nothing: exit %d, %q %q; want exit 0, held nothing", who, name, code, out, errs)
			}
			out, _, code = run("release", who, "-o", "json")
			if code != 0 || strings.Join(strings.Fields(out), "") != `{"allocations":[],"leases":[]}` {
				t.Errorf("release %s -o json %s: exit %d, %q", who, name, code, out)
			}
		}
	}
}

// TestApplyVgpudGoneAway: when vgpud dies during vgpuctl apply (here, a
// fake that answers health and closes the connection under any change),
// vgpuctl says vgpud went away and that its restart repairs or finishes
// the change, and exits 4: the host may be partly changed.
func TestApplyVgpudGoneAway(t *testing.T) {
	sock := clienttest.Vanishing(t)
	c := newCLI(t, "mixed.yaml")
	_, errs, code := c.through(sock, "apply", "-f", "testdata/config-mixed.yaml")
	if code != exitPartial || !strings.Contains(errs, "vgpud went away during the change") ||
		!strings.Contains(errs, "vgpud repairs or finishes what was cut short when it starts again") {
		t.Fatalf("vgpuctl apply with vgpud dying under it: exit %d, stderr %q; want exit 4 saying vgpud went away and its restart repairs or finishes the change",
			code, errs)
	}
}
