package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/nvstate/nvstaterpc"
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
			t.Setenv(nvstaterpc.HelperEnv, helper)
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

// TestListingsAskNVMLOnlyWhereItMatters: vgpuctl vgpus starts NVML's
// helper only for a GPU whose VFs could carry vGPUs that need NVML's type
// ids, and gpus also for a MIG-capable GPU that can be carved into vGPUs,
// whose framebuffer is NVML's total: on an L40S without VFs (no MIG, its
// type ids in the catalog) neither starts it, on an H100 without VFs
// vgpus does not and gpus does. On the H200 in a VM, which offers nothing
// to carve, the gpus table (with --why too, the topology saying it is a
// guest) does not start it, for it would double the table's time; gpus -o
// json and profiles --gpu do, for the sizes they show.
func TestListingsAskNVMLOnlyWhereItMatters(t *testing.T) {
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	helper := filepath.Join(dir, "vgpu-nvml")
	if err := os.WriteFile(helper, []byte("#!/bin/sh\necho started >>"+started+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(nvstaterpc.HelperEnv, helper)
	wasStarted := func() bool {
		_, err := os.Stat(started)
		return err == nil
	}
	l40s := newCLI(t, "l40s.yaml")
	l40s.ok("vgpus")
	l40s.ok("gpus")
	l40s.ok("gpus", "-o", "json")
	if wasStarted() {
		t.Fatal("vgpus or gpus started NVML's helper for an L40S without VFs")
	}
	h100 := newCLI(t, "h100-vf.yaml")
	if out := h100.ok("vgpus"); !strings.Contains(out, "no vGPUs carved") {
		t.Fatalf("vgpus on a bare H100:\n%s", out)
	}
	if wasStarted() {
		t.Fatal("vgpus started NVML's helper for an H100 without VFs")
	}
	if out := h100.ok("gpus"); !strings.Contains(out, "0000:cb:00.0") {
		t.Fatalf("gpus on a bare H100:\n%s", out)
	}
	if !wasStarted() {
		t.Fatal("gpus did not ask NVML for the MIG-capable H100's framebuffer")
	}
	if err := os.Remove(started); err != nil {
		t.Fatal(err)
	}
	h200 := newCLI(t, "h200-guest.yaml")
	for _, args := range [][]string{{"gpus"}, {"gpus", "--why"}, {"vgpus"}} {
		if _, errs, code := h200.run(args...); code != 0 {
			t.Fatalf("vgpuctl %s on the H200 guest: exit %d, %s", strings.Join(args, " "), code, errs)
		}
		if wasStarted() {
			t.Fatalf("vgpuctl %s started NVML's helper for the H200 guest, which offers nothing to carve", strings.Join(args, " "))
		}
	}
	for _, args := range [][]string{{"gpus", "-o", "json"}, {"profiles", "--gpu", "0000:00:06.0"}} {
		h200.ok(args...)
		if !wasStarted() {
			t.Fatalf("vgpuctl %s did not ask NVML for the H200's sizes", strings.Join(args, " "))
		}
		if err := os.Remove(started); err != nil {
			t.Fatal(err)
		}
	}
}
