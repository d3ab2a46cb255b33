package simhost

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

type gpusJSON struct {
	GPUs []inventory.GPU `json:"gpus"`
}

func TestGPUsOnMixedHost(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	var out gpusJSON
	s.vgpuctl("gpus", "-o", "json").ok(t).decode(t, &out)
	want := map[string]inventory.Dialect{
		gvtg: inventory.DialectMdev,
		mi25: inventory.DialectSRIOV,
		t4:   inventory.DialectMdev,
		l40s: inventory.DialectNVIDIAVF,
	}
	if len(out.GPUs) != len(want) {
		t.Fatalf("vgpuctl gpus found %d GPUs, want %d: %+v", len(out.GPUs), len(want), out.GPUs)
	}
	for _, g := range out.GPUs {
		d, ok := want[g.Address.String()]
		if !ok {
			t.Errorf("unexpected GPU %s", g.Address)
			continue
		}
		if len(g.Dialects) == 0 || g.Dialects[0] != d {
			t.Errorf("%s: dialects %v, want %s first", g.Address, g.Dialects, d)
		}
	}
	table := s.vgpuctl("gpus").ok(t).stdout
	for a := range want {
		if !strings.Contains(table, a) {
			t.Errorf("the gpus table lacks %s:\n%s", a, table)
		}
	}
}

// vgpusOf lists the vGPUs of one GPU.
func (s *sim) vgpusOf(t testing.TB, gpu string) []vgpu.VGPU {
	t.Helper()
	var vs []vgpu.VGPU
	s.vgpuctl("vgpus", "-o", "json").ok(t).decode(t, &vs)
	var out []vgpu.VGPU
	for _, v := range vs {
		if v.GPU == gpu {
			out = append(out, v)
		}
	}
	return out
}

// holdVFIO opens v's VFIO group node in the mount as QEMU would, until the
// test closes it or ends; it returns the node's path under the mount.
func (s *sim) holdVFIO(t testing.TB, v vgpu.VGPU) (string, *os.File) {
	t.Helper()
	node := "/dev/vfio/" + strconv.Itoa(v.IOMMUGroup)
	f, err := os.OpenFile(filepath.Join(s.Mnt, node), os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open %s as a VFIO user: %v", node, err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return node, f
}

// TestMainJob walks the README's tour: a 4:1 carve on the MI25, a 16:1
// carve on the T4, vgpus, and uncarves that bring the host back to boot.
func TestMainJob(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	boot := s.snapshot()

	var res carve.Result
	s.vgpuctl("carve", mi25, "--profile", "mi25-4g", "-o", "json").ok(t).decode(t, &res)
	if res.Plan.Profile != "mi25-4g" || res.Applied == 0 || res.Applied != len(res.Plan.Ops) {
		t.Fatalf("carve result: %+v", res)
	}
	vfs := s.vgpusOf(t, mi25)
	if len(vfs) != 4 {
		t.Fatalf("after mi25-4g: %d vGPUs on %s, want 4: %+v", len(vfs), mi25, vfs)
	}
	for _, v := range vfs {
		if v.Kind != vgpu.KindVF || v.Driver != "vfio-pci" || v.Profile != "mi25-4g" || v.InUse {
			t.Errorf("VF vGPU %+v: want an unused VF on vfio-pci carrying mi25-4g", v)
		}
		node := filepath.Join(s.Mnt, "dev", "vfio", strconv.Itoa(v.IOMMUGroup))
		if _, err := os.Stat(node); err != nil {
			t.Errorf("%s has no VFIO node: %v", v.ID, err)
		}
	}

	s.vgpuctl("carve", t4, "--profile", "t4-1q").ok(t)
	mdevs := s.vgpusOf(t, t4)
	if len(mdevs) != 16 {
		t.Fatalf("after t4-1q: %d vGPUs on %s, want 16", len(mdevs), t4)
	}
	for _, v := range mdevs {
		if v.Kind != vgpu.KindMdev || v.Type != "nvidia-230" || v.Profile != "t4-1q" {
			t.Errorf("mdev vGPU %+v: want an nvidia-230 mdev carrying t4-1q", v)
		}
	}

	// Carving what is already there does nothing.
	again := s.vgpuctl("carve", mi25, "--profile", "mi25-4g").ok(t)
	if !strings.Contains(again.stdout, "nothing to do") {
		t.Errorf("second carve: %q, want nothing to do", again.stdout)
	}

	s.vgpuctl("uncarve", mi25).ok(t)
	s.vgpuctl("uncarve", t4).ok(t)
	if out := s.vgpuctl("vgpus").ok(t).stdout; !strings.Contains(out, "no vGPUs") {
		t.Errorf("vgpus after uncarving everything:\n%s", out)
	}
	diffSnapshots(t, "carve and uncarve", boot, s.snapshot())
}

// TestBadInputExits2: a bad address, an unknown profile and a profile of
// another GPU model are usage errors, and change nothing.
func TestBadInputExits2(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	before := s.snapshot()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"carve", "0000:zz:00.0", "--profile", "mi25-4g"}, "zz"},
		{[]string{"carve", "0000:05:00.0", "--profile", "mi25-4g"}, "0000:05:00.0"},
		{[]string{"carve", mi25, "--profile", "no-such-profile"}, "no-such-profile"},
		{[]string{"carve", mi25, "--profile", "t4-1q"}, "t4-1q"},
		{[]string{"carve", mi25}, "--profile is required"},
		{[]string{"gpus", "-o", "yaml"}, "yaml"},
	}
	for _, tt := range tests {
		r := s.vgpuctl(tt.args...)
		if r.code != 2 {
			t.Errorf("vgpuctl %s: exit %d, want 2\n%s%s", strings.Join(tt.args, " "), r.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, tt.want) {
			t.Errorf("vgpuctl %s: stderr %q does not name %q", strings.Join(tt.args, " "), r.stderr, tt.want)
		}
	}
	diffSnapshots(t, "rejected commands", before, s.snapshot())
}

// TestInUseExits3: with a VF's VFIO group held open by this process, as
// QEMU would, uncarving or re-carving refuses with exit 3 and changes
// nothing; once released it goes through.
func TestInUseExits3(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	s.vgpuctl("carve", mi25, "--profile", "mi25-4g").ok(t)
	vfs := s.vgpusOf(t, mi25)
	if len(vfs) == 0 {
		t.Fatal("no VFs after carving")
	}
	node, f := s.holdVFIO(t, vfs[0])
	before := s.snapshot()

	if _, err := os.OpenFile(filepath.Join(s.Mnt, node), os.O_RDWR, 0); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("second open of %s: %v, want EBUSY", node, err)
	}
	var listed []vgpu.VGPU
	s.vgpuctl("vgpus", "-o", "json").ok(t).decode(t, &listed)
	i := slices.IndexFunc(listed, func(v vgpu.VGPU) bool { return v.ID == vfs[0].ID })
	if i < 0 || !listed[i].InUse || !strings.Contains(listed[i].Holder, node) {
		t.Fatalf("vgpus does not show %s in use through %s: %+v", vfs[0].ID, node, listed)
	}
	for _, args := range [][]string{{"uncarve", mi25}, {"carve", mi25, "--profile", "mi25-2g"}} {
		r := s.vgpuctl(args...)
		if r.code != 3 {
			t.Fatalf("vgpuctl %s with %s open: exit %d, want 3\n%s", strings.Join(args, " "), node, r.code, r.stderr)
		}
		if !strings.Contains(r.stderr, vfs[0].ID) {
			t.Errorf("refusal does not name the vGPU in use %s: %q", vfs[0].ID, r.stderr)
		}
	}
	diffSnapshots(t, "refused commands", before, s.snapshot())
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	s.WaitOpens(node, 0)
	s.vgpuctl("uncarve", mi25).ok(t)
	if n := len(s.vgpusOf(t, mi25)); n != 0 {
		t.Fatalf("%d vGPUs left after uncarve", n)
	}
}

// TestUseUnknownExits3: a process whose open files vgpuctl cannot read (as
// without CAP_SYS_PTRACE) holds a VF: vgpus still answers, shows every VF
// nobody visible holds as of unknown use with one warning naming the
// capability; uncarving is refused (exit 3) and changes nothing, and once
// the VF is let go (the process still hidden) --force goes through.
func TestUseUnknownExits3(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	s.vgpuctl("carve", mi25, "--profile", "mi25-4g").ok(t)
	vfs := s.vgpusOf(t, mi25)
	if len(vfs) != 4 {
		t.Fatalf("%d vGPUs after carving, want 4", len(vfs))
	}
	node, f := s.holdVFIO(t, vfs[0])
	ctl, err := os.OpenFile(filepath.Join(s.Mnt, "dev/vfio/vfio"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	if err := s.Client.SetFDsUnreadable(context.Background(), os.Getpid(), true); err != nil {
		t.Fatal(err)
	}
	before := s.snapshot()

	r := s.vgpuctl("vgpus", "-o", "json").ok(t)
	var listed []vgpu.VGPU
	r.decode(t, &listed)
	for _, v := range listed {
		if v.GPU == mi25 && (!v.UseUnknown || v.InUse) {
			t.Errorf("%s: in use %v, unknown %v; want unknown", v.ID, v.InUse, v.UseUnknown)
		}
	}
	if strings.Count(r.stderr, "warning:") != 1 || !strings.Contains(r.stderr, "CAP_SYS_PTRACE") {
		t.Errorf("vgpus stderr %q: want one warning naming CAP_SYS_PTRACE", r.stderr)
	}
	if table := s.vgpuctl("vgpus").ok(t).stdout; !strings.Contains(table, "unknown") {
		t.Errorf("the vgpus table shows no unknown use:\n%s", table)
	}
	for _, args := range [][]string{{"uncarve", mi25}, {"carve", mi25, "--profile", "mi25-2g"}} {
		r := s.vgpuctl(args...)
		if r.code != 3 || !strings.Contains(r.stderr, "CAP_SYS_PTRACE") || !strings.Contains(r.stderr, vfs[0].ID) {
			t.Fatalf("vgpuctl %s with a hidden process: exit %d, stderr %q; want 3 naming the VF and CAP_SYS_PTRACE",
				strings.Join(args, " "), r.code, r.stderr)
		}
	}
	diffSnapshots(t, "refused commands", before, s.snapshot())

	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	s.WaitOpens(node, 0)
	if r := s.vgpuctl("uncarve", mi25); r.code != 3 {
		t.Fatalf("uncarve while the hidden process runs: exit %d, want 3\n%s", r.code, r.stderr)
	}
	s.vgpuctl("uncarve", mi25, "--force").ok(t)
	if n := len(s.vgpusOf(t, mi25)); n != 0 {
		t.Fatalf("%d vGPUs left after a forced uncarve", n)
	}
}

// TestVirtualParentListed: the mdevs vgpuctl carves on the mbochs sample, a
// virtual mdev parent, are listed by vgpuctl vgpus as vGPUs of the profile,
// and go with the uncarve.
func TestVirtualParentListed(t *testing.T) {
	s := startSim(t, "mbochs.yaml")
	cat := filepath.Join(built.repo, "e2e", "lab", "profiles")
	s.vgpuctl("--profiles", cat, "carve", "mbochs", "--profile", "lab-mbochs-64m").ok(t)
	var vs []vgpu.VGPU
	s.vgpuctl("--profiles", cat, "vgpus", "-o", "json").ok(t).decode(t, &vs)
	if len(vs) != 4 {
		t.Fatalf("vgpus after carving mbochs: %+v; want 4", vs)
	}
	for _, v := range vs {
		if v.GPU != "mbochs" || v.Parent != "mbochs" || v.Kind != vgpu.KindMdev || v.Type != "mbochs-large" || v.Profile != "lab-mbochs-64m" || v.InUse {
			t.Errorf("vGPU %+v: want an unused mbochs-large mdev of mbochs carrying lab-mbochs-64m", v)
		}
	}
	s.vgpuctl("uncarve", "mbochs").ok(t)
	if out := s.vgpuctl("vgpus").ok(t).stdout; !strings.Contains(out, "no vGPUs") {
		t.Errorf("vgpus after the uncarve:\n%s", out)
	}
}
