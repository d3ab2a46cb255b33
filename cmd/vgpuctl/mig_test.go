package main

import (
	"strings"
	"testing"
)

// TestMIGCarveWithoutVgpud: vgpuctl's own carve of a MIG-backed profile
// needs NVML. The static build cannot load it and says to use vgpud; the
// cgo build loads it and, where the library is missing (this test host),
// names it. Either way one line, and every other GPU carves as before.
func TestMIGCarveWithoutVgpud(t *testing.T) {
	c := newCLI(t, "a100-vf.yaml")
	_, errs, code := c.run("carve", "0000:ca:00.0", "--profile", "a100-1-5c")
	if code == 0 || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, "GPU 0000:ca:00.0") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if !strings.Contains(errs, "use vgpud (or vgpuctl-libvirt)") && !strings.Contains(errs, "libnvidia-ml.so.1 did not load") {
		t.Fatalf("stderr %q says neither where MIG works nor which library is missing", errs)
	}
	t.Logf("stderr: %s", errs)
	if out := c.ok("vgpus"); strings.Contains(out, "a100-1-5c") {
		t.Fatalf("a refused carve made vGPUs:\n%s", out)
	}
}
