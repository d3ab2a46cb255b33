package simhost

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/mdevctl"
	"github.com/vgpu-project/vgpu/pkg/mdevctl/mdevctltest"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// mdevctl runs Debian's mdevctl where /sys is the simulated host's: in a
// private mount namespace, with the mount's sys/ bound over /sys. The whole
// of /sys, not just class/mdev_bus and bus/mdev: their links are relative
// ("../../devices/pci0000:3a/..."), and must land in the simulated tree.
// Its /etc/mdevctl.d is the sim's own (mdevctlDir), never the machine's:
// Debian 12's mdevctl 1.2 has no MDEVCTL_ENV_ROOT, so it is bound too.
func (s *sim) mdevctl(t testing.TB, args ...string) result {
	t.Helper()
	for _, bin := range []string{"mdevctl", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not installed (scripts/deps.sh installs it: apt-get install mdevctl util-linux): %v", bin, err)
		}
	}
	script := `mount --bind "$1/sys" /sys && mount --bind "$2" /etc/mdevctl.d && shift 2 && exec mdevctl "$@"`
	r, err := runBinary(s.Sim, "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", s.Mnt, s.mdevctlDir(t)}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	r.args = append([]string{"mdevctl"}, args...)
	return r
}

// mdevctlDir is the sim's mdevctl directory, laid out as the package
// installs it (mdevctl 1.2 refuses to run without scripts.d's two).
func (s *sim) mdevctlDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(s.Dir, "mdevctl.d")
	for _, d := range []string{"scripts.d/callouts", "scripts.d/notifiers"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
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
	var vs []vgpu.VGPU
	s.vgpuctl("vgpus", "-o", "json").ok(t).decode(t, &vs)
	if len(vs) != 1 || vs[0].ID != uuid || vs[0].GPU != t4 || vs[0].Type != "nvidia-231" || vs[0].Kind != vgpu.KindMdev {
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

// TestMdevctlReadsAsVgpu: Debian's mdevctl reads each definition file as
// pkg/mdevctl does: it lists the same type and start, or fails on the same
// files (mdevctl then lists nothing, and starts nothing at boot either).
func TestMdevctlReadsAsVgpu(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	const uuid = "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44"
	file := filepath.Join(s.mdevctlDir(t), t4, uuid)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range mdevctltest.ReadCases() {
		if err := os.WriteFile(file, []byte(c.JSON), 0o644); err != nil {
			t.Fatal(err)
		}
		r := s.mdevctl(t, "list", "--defined")
		defs, bad, err := mdevctl.Read(s.mdevctlDir(t))
		if err != nil {
			t.Fatal(err)
		}
		if refused := r.code != 0; refused != (len(bad) == 1) || refused != c.Refused {
			t.Errorf("%s: mdevctl exit %d (%s), vgpu read %d bad; the case says refused=%v", c.Name, r.code, strings.TrimSpace(r.stderr), len(bad), c.Refused)
			continue
		}
		if c.Refused {
			continue
		}
		start := "manual"
		if defs[0].Auto() {
			start = "auto"
		}
		if want := uuid + " " + t4 + " " + defs[0].Type + " " + start; strings.TrimSpace(r.stdout) != want {
			t.Errorf("%s: mdevctl lists %q, vgpu reads %q", c.Name, strings.TrimSpace(r.stdout), want)
		}
	}
}

// TestMdevctlImport: a host whose T4 mdevctl fills moves to vgpud. mdevctl
// defines two mdevs and starts one; vgpuctl import mdevctl reads what it
// wrote and prints the config; vgpud's apply refuses it, and a carve of the
// T4, while mdevctl starts an mdev there; after the header's mdevctl modify
// --manual the apply carves the T4, keeps the running mdev and makes the
// defined one with its UUID (the import pins both); after a reboot the
// same apply makes the very same mdevs again.
func TestMdevctlImport(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	const running, defined = "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44", "0b6f3c1e-2d4a-4e5b-8c7d-9e0f1a2b3c4d"
	dir := s.mdevctlDir(t)
	s.mdevctl(t, "define", "-u", running, "-p", t4, "-t", "nvidia-232", "--auto").ok(t)
	s.mdevctl(t, "define", "-u", defined, "-p", t4, "-t", "nvidia-232").ok(t)
	s.mdevctl(t, "start", "-u", running).ok(t)

	imp := s.vgpuctl("--mdevctl-dir", dir, "import", "mdevctl").ok(t).stdout
	for _, want := range []string{"  - address: \"" + t4 + "\"\n    profile: t4-4q\n",
		running + " (" + t4 + ", start auto): pinned: running, vgpud's carve keeps it",
		defined + " (" + t4 + ", start manual): pinned: not running, vgpud's carve makes it",
		"    mdev-uuids:\n      - " + defined + "\n      - " + running + "\n"} {
		if !strings.Contains(imp, want) {
			t.Fatalf("import lacks %q:\n%s", want, imp)
		}
	}
	cfg := filepath.Join(s.Dir, "imported.yaml")
	if err := os.WriteFile(cfg, []byte(imp), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(s.Dir, "etc", "config.yaml")
	r := s.vgpuctl("--mdevctl-dir", dir, "apply", "-f", cfg, "--config", target)
	if r.code != 2 || !strings.Contains(r.stderr, "mdevctl starts mdevs on "+t4+" when it appears (start auto in "+filepath.Join(dir, t4)+": "+running+")") {
		t.Fatalf("apply while mdevctl starts the T4's mdev: exit %d\n%s", r.code, r.stderr)
	}
	if r := s.vgpuctl("--mdevctl-dir", dir, "carve", t4, "--profile", "t4-4q"); r.code != 2 || !strings.Contains(r.stderr, "mdevctl starts mdevs on "+t4) {
		t.Fatalf("carve while mdevctl starts the T4's mdev: exit %d\n%s", r.code, r.stderr)
	}

	// The commands the import's header gives, as an admin would run them.
	var ran int
	for _, l := range strings.Split(imp, "\n") {
		cmd, ok := strings.CutPrefix(l, "#   mdevctl ")
		if !ok {
			continue
		}
		s.mdevctl(t, strings.Fields(cmd)...).ok(t)
		ran++
	}
	if ran != 1 {
		t.Fatalf("the import's header gives %d mdevctl commands, want 1:\n%s", ran, imp)
	}
	s.vgpuctl("--mdevctl-dir", dir, "apply", "-f", cfg, "--config", target).ok(t)
	t4Mdevs := func(when string) []string {
		t.Helper()
		var vs []vgpu.VGPU
		s.vgpuctl("vgpus", "-o", "json").ok(t).decode(t, &vs)
		var ids []string
		for _, v := range vs {
			if v.GPU != t4 || v.Type != "nvidia-232" {
				t.Errorf("%s: %+v", when, v)
			}
			ids = append(ids, v.ID)
		}
		if len(ids) != 4 || !slices.Contains(ids, running) || !slices.Contains(ids, defined) {
			t.Fatalf("%s: vGPUs %v; want 4 with %s and %s", when, ids, running, defined)
		}
		slices.Sort(ids)
		return ids
	}
	applied := t4Mdevs("after apply")

	// A reboot: every mdev is gone, the config stays; the apply from
	// scratch makes the same four mdevs again, the pinned ones included.
	if code := s.Stop(); code != 0 {
		t.Fatalf("vgpusim exited %d", code)
	}
	s.Restart()
	if list := s.mdevctl(t, "list").ok(t).stdout; strings.TrimSpace(list) != "" {
		t.Fatalf("mdevs after the reboot:\n%s", list)
	}
	s.vgpuctl("--mdevctl-dir", dir, "apply", "-f", cfg, "--config", target).ok(t)
	if again := t4Mdevs("after the reboot's apply"); !slices.Equal(again, applied) {
		t.Fatalf("after the reboot's apply %v, before %v", again, applied)
	}
	// mdevctl lists both definitions' mdevs as its own again.
	list := s.mdevctl(t, "list").ok(t).stdout
	for _, u := range []string{running, defined} {
		if !strings.Contains(list, u+" "+t4+" nvidia-232") {
			t.Errorf("mdevctl list after the reboot's apply lacks %s:\n%s", u, list)
		}
	}
	if list := s.mdevctl(t, "list", "--defined").ok(t).stdout; !strings.Contains(list, running+" "+t4+" nvidia-232 manual") {
		t.Errorf("mdevctl's definition after modify --manual:\n%s", list)
	}
}
