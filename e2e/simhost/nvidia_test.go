package simhost

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSriovManageOverFUSE: vgpuctl, as a process with --sysfs-root on the
// mount, finds NVIDIA's sriov-manage where the vendor installs it under
// that root and runs it: every VF of the L40S appears, the PF stays on
// nvidia, and an uncarve takes the VFs away the same way. --sriov-manage
// overrides the path, and a missing tool is one clear error.
func TestSriovManageOverFUSE(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	tool := filepath.Join(s.Mnt, "usr/lib/nvidia/sriov-manage")
	if _, err := os.Stat(tool); err != nil {
		t.Fatalf("the simulated host has no sriov-manage: %v", err)
	}
	read := func(attr string) string {
		b, err := os.ReadFile(filepath.Join(s.Mnt, "sys/bus/pci/devices", l40s, attr))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	driver := func() string {
		l, err := os.Readlink(filepath.Join(s.Mnt, "sys/bus/pci/devices", l40s, "driver"))
		if err != nil {
			return ""
		}
		return filepath.Base(l)
	}

	missing := s.vgpuctl("--sriov-manage", filepath.Join(s.Dir, "no-such-tool"), "carve", l40s, "--profile", "l40s-12q")
	if missing.code == 0 || !strings.Contains(missing.stderr, "no-such-tool") || strings.Count(strings.TrimSpace(missing.stderr), "\n") > 0 {
		t.Fatalf("carve with a missing sriov-manage: exit %d, stderr %q", missing.code, missing.stderr)
	}
	if read("sriov_numvfs") != "0" || driver() != "nvidia" {
		t.Fatalf("the failed carve changed the GPU: numvfs %s, driver %s", read("sriov_numvfs"), driver())
	}

	s.vgpuctl("carve", l40s, "--profile", "l40s-12q").ok(t)
	if got := read("sriov_numvfs"); got != "32" {
		t.Fatalf("sriov_numvfs = %s after the carve, want every VF (32)", got)
	}
	if d := driver(); d != "nvidia" {
		t.Fatalf("PF on %q after sriov-manage", d)
	}
	if vs := s.vgpusOf(t, l40s); len(vs) != 4 {
		t.Fatalf("%d vGPUs, want 4: %+v", len(vs), vs)
	}
	s.vgpuctl("uncarve", l40s).ok(t)
	if got := read("sriov_numvfs"); got != "0" || driver() != "nvidia" {
		t.Fatalf("after uncarve: numvfs %s, driver %s", got, driver())
	}
}

// TestProfilesOfNameOnlyTypes: the catalog gives the H100's types by name
// only (their ids come from NVML), so vgpuctl profiles asks NVML, here
// vgpusim's, as vgpuctl gpus does: the H100's profiles fit it and say so,
// where without NVML's ids none would resolve and the table stayed empty.
func TestProfilesOfNameOnlyTypes(t *testing.T) {
	const h100 = "0000:cb:00.0"
	s := startSim(t, "nvidia-nvml.yaml")
	type row struct {
		Name     string   `json:"name"`
		HostGPUs []string `json:"hostGPUs"`
	}
	var rows []row
	s.vgpuctl("profiles", "--gpu", h100, "-o", "json").ok(t).decode(t, &rows)
	names := map[string]bool{}
	for _, r := range rows {
		names[r.Name] = true
	}
	for _, want := range []string{"h100-80c", "h100-10c", "h100-1-10c"} {
		if !names[want] {
			t.Errorf("profiles --gpu %s lacks %s: %v", h100, want, rows)
		}
	}
	rows = nil
	s.vgpuctl("profiles", "-o", "json").ok(t).decode(t, &rows)
	for _, r := range rows {
		if r.Name == "h100-80c" && !slices.Contains(r.HostGPUs, h100) {
			t.Errorf("profiles: h100-80c fits %v, want %s among them", r.HostGPUs, h100)
		}
	}
}

// TestSizesFromNVMLOverFUSE: on a host whose NVML answers (vgpusim's fake
// of it), vgpuctl shows an NVIDIA MIG-capable GPU's framebuffer as NVML's
// memory total, below the board's nominal 80 GB, and a MIG-backed
// profile's vGPU size as NVML's GPU instance profile states it.
func TestSizesFromNVMLOverFUSE(t *testing.T) {
	const h100 = "0000:cb:00.0"
	s := startSim(t, "nvidia-nvml.yaml")
	var out gpusJSON
	s.vgpuctl("gpus", "-o", "json").ok(t).decode(t, &out)
	found := false
	for _, g := range out.GPUs {
		if g.Address.String() != h100 {
			continue
		}
		found = true
		if g.FramebufferMB != 81559 {
			t.Errorf("H100 framebufferMB %d, want NVML's 81559", g.FramebufferMB)
		}
		if p, ok := g.MIGProfile(19); !ok || p.MemoryMB != 9984 {
			t.Errorf("H100 MIG profile 19: %+v, %v; want 9984 MiB", p, ok)
		}
	}
	if !found {
		t.Fatalf("vgpuctl gpus does not list %s: %+v", h100, out.GPUs)
	}
	row := func(table, first string) []string {
		for _, l := range strings.Split(table, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == first {
				return f
			}
		}
		t.Fatalf("no %s row in:\n%s", first, table)
		return nil
	}
	if f := row(s.vgpuctl("gpus", h100).ok(t).stdout, h100); !slices.Contains(f, "81559M") {
		t.Errorf("the gpus row of the H100 does not show NVML's 81559M: %v", f)
	}
	if f := row(s.vgpuctl("profiles", "--gpu", h100).ok(t).stdout, "h100-1-10c"); !slices.Contains(f, "9984M") {
		t.Errorf("profiles --gpu: h100-1-10c's FB/VGPU is not NVML's 9984M: %v", f)
	}
}
