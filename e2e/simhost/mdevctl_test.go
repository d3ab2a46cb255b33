package simhost

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/carve"
)

// mdevctl runs Debian's mdevctl where /sys is the simulated host's: in a
// private mount namespace, with the mount's sys/ bound over /sys. The whole
// of /sys, not just class/mdev_bus and bus/mdev: their links are relative
// ("../../devices/pci0000:3a/..."), and must land in the simulated tree.
func (s *sim) mdevctl(t testing.TB, args ...string) result {
	t.Helper()
	for _, bin := range []string{"mdevctl", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not installed (scripts/deps.sh installs it: apt-get install mdevctl util-linux): %v", bin, err)
		}
	}
	script := `mount --bind "$1/sys" /sys && shift && exec mdevctl "$@"`
	r, err := runBinary(s.Sim, "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", s.Mnt}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	r.args = append([]string{"mdevctl"}, args...)
	return r
}

// typeBlock is mdevctl types' paragraph for one type of one parent.
func typeBlock(t testing.TB, out, parent, typ string) string {
	t.Helper()
	_, after, ok := strings.Cut(out, parent+"\n")
	if !ok {
		t.Fatalf("mdevctl types does not list parent %s:\n%s", parent, out)
	}
	_, block, ok := strings.Cut(after, "  "+typ+"\n")
	if !ok {
		t.Fatalf("mdevctl types does not list %s under %s:\n%s", typ, parent, out)
	}
	if i := strings.Index(block, "\n  "+strings.SplitN(typ, "-", 2)[0]); i >= 0 {
		block = block[:i]
	}
	return block
}

// TestMdevctlInterop: a third-party tool cannot tell the simulation from
// the kernel. mdevctl lists the T4's types, starts and stops an mdev, and
// vgpuctl, outside the namespace, sees what mdevctl did and the reverse.
func TestMdevctlInterop(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	const uuid = "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44"

	types := s.mdevctl(t, "types").ok(t).stdout
	block := typeBlock(t, types, t4, "nvidia-231")
	for _, want := range []string{"Available instances: 8", "Device API: vfio-pci", "Name: GRID T4-2Q", "framebuffer=2048M"} {
		if !strings.Contains(block, want) {
			t.Errorf("mdevctl types, %s nvidia-231 lacks %q:\n%s", t4, want, block)
		}
	}
	if !strings.Contains(types, gvtg+"\n") || !strings.Contains(types, "i915-GVTg_V5_4") {
		t.Errorf("mdevctl types does not list the GVT-g parent:\n%s", types)
	}

	s.mdevctl(t, "start", "-u", uuid, "-p", t4, "--type", "nvidia-231").ok(t)
	list := s.mdevctl(t, "list").ok(t).stdout
	if !regexp.MustCompile(`(?m)^` + uuid + ` ` + regexp.QuoteMeta(t4) + ` nvidia-231`).MatchString(list) {
		t.Fatalf("mdevctl list does not show the started mdev:\n%s", list)
	}
	var vs []carve.VGPU
	s.vgpuctl("vgpus", "-o", "json").ok(t).decode(t, &vs)
	if len(vs) != 1 || vs[0].ID != uuid || vs[0].GPU != t4 || vs[0].Type != "nvidia-231" || vs[0].Kind != carve.KindMdev {
		t.Fatalf("vgpuctl vgpus after mdevctl start: %+v", vs)
	}
	after := typeBlock(t, s.mdevctl(t, "types").ok(t).stdout, t4, "nvidia-231")
	if !strings.Contains(after, "Available instances: 7") {
		t.Errorf("nvidia-231 after one instance:\n%s", after)
	}

	s.mdevctl(t, "stop", "-u", uuid).ok(t)
	if list := s.mdevctl(t, "list").ok(t).stdout; strings.Contains(list, uuid) {
		t.Fatalf("mdevctl list still shows %s after stop:\n%s", uuid, list)
	}
	if out := s.vgpuctl("vgpus").ok(t).stdout; !strings.Contains(out, "no vGPUs") {
		t.Fatalf("vgpuctl vgpus after mdevctl stop:\n%s", out)
	}

	// And the reverse: mdevctl sees what vgpuctl carves.
	s.vgpuctl("carve", t4, "--profile", "t4-4q").ok(t)
	list = s.mdevctl(t, "list").ok(t).stdout
	if n := strings.Count(list, " "+t4+" nvidia-232"); n != 4 {
		t.Fatalf("mdevctl list shows %d nvidia-232 mdevs after a t4-4q carve, want 4:\n%s", n, list)
	}
}
