package simhost

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// driverIn reads a function's driver from the mount ("" unbound).
func (s *sim) driverIn(t testing.TB, dev string) string {
	t.Helper()
	l, err := os.Readlink(filepath.Join(s.Mnt, "sys/bus/pci/devices", dev, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(l)
}

// oneLine fails unless r failed with code and one line of stderr holding
// every want.
func (r result) oneLine(t testing.TB, code int, want ...string) {
	t.Helper()
	if r.code != code || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("vgpuctl %s: exit %d, stderr %q; want exit %d and one line", strings.Join(r.args, " "), r.code, r.stderr, code)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("vgpuctl %s: %q lacks %q", strings.Join(r.args, " "), r.stderr, w)
		}
	}
}

// The H200 passed through to a VM without a vIOMMU, under the datacenter
// driver, as the real one was: the binaries offer nothing, say why in
// every listing, refuse every carve in one line, and change nothing. Its
// NVML (the measured H200's, as a guest's driver answers) gives -o json
// the memory total; the table, which asks NVML only where vGPUs can be
// carved, shows none.
func TestH200GuestOverFUSE(t *testing.T) {
	s := startSim(t, "h200-guest.yaml")
	const gpu = "0000:00:06.0"
	boot := s.snapshot()
	var out gpusJSON
	s.vgpuctl("gpus", "-o", "json").ok(t).decode(t, &out)
	if len(out.GPUs) != 1 || len(out.GPUs[0].Dialects) != 0 || len(out.GPUs[0].Unavailable) != 2 {
		t.Fatalf("gpus -o json: %+v", out.GPUs)
	}
	if fb := out.GPUs[0].FramebufferMB; fb != 143771 {
		t.Errorf("gpus -o json: framebuffer %d MiB, want NVML's total 143771", fb)
	}
	table := s.vgpuctl("gpus").ok(t)
	if !strings.Contains(table.stderr, "nothing can be carved on "+gpu) {
		t.Errorf("gpus: no hint on stderr: %q", table.stderr)
	}
	if f := strings.Fields(strings.Split(table.stdout, "\n")[1]); len(f) < 10 || f[len(f)-4] != "-" {
		t.Errorf("gpus: FB should be \"-\" (no NVML for a GPU that offers nothing):\n%s", table.stdout)
	}
	why := s.vgpuctl("gpus", "--why").ok(t).stdout
	for _, w := range []string{"no IOMMU group: enable the IOMMU", "this OS is a guest", "NVIDIA datacenter driver 580.159.04, not the vGPU host driver"} {
		if !strings.Contains(why, w) {
			t.Errorf("gpus --why lacks %q:\n%s", w, why)
		}
	}
	if p := s.vgpuctl("profiles", "--gpu", gpu).ok(t).stdout; strings.Count(p, "\n") != 4 || !strings.Contains(p, "WHY NOT") {
		t.Errorf("profiles --gpu: want a header and a line per catalog file and the built-in:\n%s", p)
	}
	s.vgpuctl("carve", gpu, "--profile", "passthrough", "--dry-run").oneLine(t, 2, "no IOMMU group")
	s.vgpuctl("carve", gpu, "--profile", "passthrough", "--force").oneLine(t, 2, "no IOMMU group")
	s.vgpuctl("carve", gpu, "--profile", "h200x-1-18c").oneLine(t, 2, "this OS is a guest", "not the vGPU host driver")
	s.vgpuctl("carve", gpu, "--profile", "h200x-1-18").oneLine(t, 2, `unknown profile "h200x-1-18"`)
	if _, err := os.Stat(filepath.Join(s.Mnt, "usr/lib/nvidia/sriov-manage")); err == nil {
		t.Error("sriov-manage installed under the datacenter driver")
	}
	diffSnapshots(t, "the refused carves", boot, s.snapshot())
}

// A GPU no catalog file knows is passed through by the built-in profile,
// its HD audio with it; vgpus lists it; the uncarve gives each function
// its driver back, leaving the host as it booted.
func TestPassthroughWithoutCatalogOverFUSE(t *testing.T) {
	s := startSim(t, "rtx4090.yaml")
	const gpu, audio = "0000:01:00.0", "0000:01:00.1"
	boot := s.snapshot()
	s.vgpuctl("carve", gpu, "--profile", "passthrough").ok(t)
	for _, dev := range []string{gpu, audio} {
		if d := s.driverIn(t, dev); d != "vfio-pci" {
			t.Errorf("%s on %q after the passthrough", dev, d)
		}
	}
	vs := s.vgpusOf(t, gpu)
	if len(vs) != 1 || vs[0].Kind != vgpu.KindPF || vs[0].Profile != "passthrough" {
		t.Errorf("vgpus: %+v", vs)
	}
	s.vgpuctl("uncarve", gpu).ok(t)
	diffSnapshots(t, "carve and uncarve", boot, s.snapshot())
}

// The console's GPU: refused (exit 3) until forced, and given back.
func TestConsoleGPUOverFUSE(t *testing.T) {
	s := startSim(t, "desktop.yaml")
	boot := s.snapshot()
	s.vgpuctl("carve", gvtg, "--profile", "passthrough").oneLine(t, 3, "drives the host's console (boot_vga 1)", "--force")
	diffSnapshots(t, "the refused passthrough", boot, s.snapshot())
	s.vgpuctl("carve", gvtg, "--profile", "passthrough", "--force").ok(t)
	if d := s.driverIn(t, gvtg); d != "vfio-pci" {
		t.Errorf("forced: %q", d)
	}
	s.vgpuctl("uncarve", gvtg).ok(t)
	diffSnapshots(t, "the forced carve and its uncarve", boot, s.snapshot())
}

// A bare-metal L40S under the datacenter driver and under the vGPU host
// driver: passthrough alone with the driver named, against nvidia-vf.
func TestNVIDIADriverKindsOverFUSE(t *testing.T) {
	for _, c := range []struct {
		host string
		want inventory.Dialect
	}{{"l40s-datacenter.yaml", inventory.DialectPassthrough}, {"l40s.yaml", inventory.DialectNVIDIAVF}} {
		s := startSim(t, c.host)
		var out gpusJSON
		s.vgpuctl("gpus", "-o", "json").ok(t).decode(t, &out)
		g := out.GPUs[0]
		if g.Dialects[0] != c.want || g.NVIDIADriver == nil || g.NVIDIADriver.VGPUHost != (c.want == inventory.DialectNVIDIAVF) {
			t.Errorf("%s: dialects %v, driver %+v", c.host, g.Dialects, g.NVIDIADriver)
		}
		if c.want == inventory.DialectPassthrough {
			s.vgpuctl("carve", l40s, "--profile", "l40s-12q").oneLine(t, 2, "not the vGPU host driver", "it can be passed through whole")
		}
	}
}
