package simhost

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// vgpuctl carves an old-GIM S7150 on the mounted host as on a real one:
// through the host's modprobe (here vgpusim's, reaching its kernel), never
// a write to sriov_numvfs.
func TestGIMReloadOverFUSE(t *testing.T) {
	s := startSim(t, "s7150.yaml")
	const gpu = "0000:3d:00.0"
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(s.Mnt, p))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	numvfs := "sys/bus/pci/devices/" + gpu + "/sriov_numvfs"
	if got := read(numvfs); got != "16" {
		t.Fatalf("gim enabled %s VFs at boot, want 16", got)
	}
	s.vgpuctl("carve", gpu, "--profile", "s7150-2g").ok(t)
	if got := read(numvfs); got != "4" {
		t.Fatalf("sriov_numvfs = %s after the carve, want 4", got)
	}
	if got := read("etc/gim_config"); !strings.Contains(got, "vf_num=4") {
		t.Fatalf("/etc/gim_config = %q, want vf_num=4", got)
	}
	if vs := s.vgpusOf(t, gpu); len(vs) != 4 {
		t.Fatalf("%d vGPUs, want 4: %+v", len(vs), vs)
	}

	// A reboot: /etc survives, gim loads with the vf_num it saved, and the
	// carve that re-applies the profile only binds the VFs.
	if code := s.Stop(); code != 0 {
		t.Fatalf("vgpusim exited %d", code)
	}
	s.Restart()
	if got := read(numvfs); got != "4" {
		t.Fatalf("after a reboot gim enabled %s VFs, want the saved 4", got)
	}
	if vs := s.vgpusOf(t, gpu); len(vs) != 0 {
		t.Fatalf("after a reboot %d VFs are on vfio-pci, want none", len(vs))
	}
	res := s.vgpuctl("carve", gpu, "--profile", "s7150-2g")
	res.ok(t)
	if strings.Contains(res.stdout, "reload gim") || !strings.Contains(res.stdout, "done, 4 steps") {
		t.Fatalf("re-apply after a reboot:\n%s", res.stdout)
	}
}
