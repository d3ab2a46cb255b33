package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/mig/migrpc"
)

// TestMIGCarveWithoutVgpud: vgpuctl's own carve of a MIG-backed profile
// needs NVML, which it reaches through vgpu-nvml. Where the helper is
// missing, or where it runs and the library is missing (this test host),
// the carve fails with one line naming the GPU and what is missing, and
// every other GPU carves as before.
func TestMIGCarveWithoutVgpud(t *testing.T) {
	helper := filepath.Join(t.TempDir(), "vgpu-nvml")
	for _, tc := range []struct {
		name, want string
		build      bool
	}{
		{"no helper", helper, false},
		{"no library", "libnvidia-ml.so.1 did not load", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.build {
				if out, err := exec.Command("go", "build", "-o", helper, "../vgpu-nvml").CombinedOutput(); err != nil {
					t.Fatalf("go build vgpu-nvml: %v\n%s", err, out)
				}
			}
			t.Setenv(migrpc.HelperEnv, helper)
			c := newCLI(t, "a100-vf.yaml")
			_, errs, code := c.run("carve", "0000:ca:00.0", "--profile", "a100-1-5c")
			if code == 0 || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, "GPU 0000:ca:00.0") ||
				!strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, stderr %q, want one line naming the GPU and %q", code, errs, tc.want)
			}
			t.Logf("stderr: %s", errs)
			if out := c.ok("vgpus"); strings.Contains(out, "a100-1-5c") {
				t.Fatalf("a refused carve made vGPUs:\n%s", out)
			}
			c.ok("carve", "0000:ca:00.0", "--profile", "a100-vf-10c")
		})
	}
}

// TestListingsAskNVMLOnlyForVFs: vgpuctl vgpus and the gpus table start
// NVML's helper only for a GPU whose VFs could carry vGPUs that need NVML's
// type ids; on an H100 without VFs they start none, where gpus -o json,
// which shows the types, does (the catalog names the H100's types only).
func TestListingsAskNVMLOnlyForVFs(t *testing.T) {
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	helper := filepath.Join(dir, "vgpu-nvml")
	if err := os.WriteFile(helper, []byte("#!/bin/sh\necho started >>"+started+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(migrpc.HelperEnv, helper)
	c := newCLI(t, "h100-vf.yaml")
	if out := c.ok("vgpus"); !strings.Contains(out, "no vGPUs carved") {
		t.Fatalf("vgpus on a bare H100:\n%s", out)
	}
	if out := c.ok("gpus"); !strings.Contains(out, "0000:cb:00.0") {
		t.Fatalf("gpus on a bare H100:\n%s", out)
	}
	if _, err := os.Stat(started); err == nil {
		t.Fatal("vgpus or gpus started NVML's helper for a GPU without VFs")
	}
	c.ok("gpus", "-o", "json")
	if _, err := os.Stat(started); err != nil {
		t.Fatalf("gpus -o json did not start NVML's helper either (%v): the test proves nothing", err)
	}
}
