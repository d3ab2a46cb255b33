package simhost

import (
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// referenceSnapshots carves each profile on a fresh host, alone: what the
// host must look like when that profile won.
func referenceSnapshots(t testing.TB, gpu string, profiles ...string) map[string]map[string]string {
	t.Helper()
	refs := map[string]map[string]string{}
	for _, p := range profiles {
		ref := startSim(t, "mixed.yaml")
		ref.vgpuctl("carve", gpu, "--profile", p).ok(t)
		refs[p] = ref.snapshot()
		if code := ref.Stop(); code != 0 {
			t.Fatalf("reference vgpusim exited %d", code)
		}
	}
	return refs
}

// TestRacingCarves starts two vgpuctl carves of one GPU with different
// profiles at the same moment. Either both succeed (one waits for the
// other's lock and then re-plans) or one fails cleanly; either way the
// host ends carrying exactly one of the two profiles, and looks exactly
// as if that profile had been carved alone: nothing half-done.
func TestRacingCarves(t *testing.T) {
	cases := []struct {
		gpu  string
		a, b string
	}{
		{mi25, "mi25-4g", "mi25-2g"},
		{t4, "t4-4q", "t4-1q"},
	}
	for _, c := range cases {
		t.Run(c.gpu, func(t *testing.T) {
			refs := referenceSnapshots(t, c.gpu, c.a, c.b)
			s := startSim(t, "mixed.yaml")
			for round := 0; round < 3; round++ {
				ca := s.vgpuctlCmd("carve", c.gpu, "--profile", c.a)
				cb := s.vgpuctlCmd("carve", c.gpu, "--profile", c.b)
				ca.start(t)
				cb.start(t)
				ra, rb := ca.wait(t), cb.wait(t)
				for _, r := range []result{ra, rb} {
					if r.code != 0 && r.code != 1 {
						t.Fatalf("round %d: vgpuctl %s: exit %d (want 0, or 1 with the host as it was)\n%s",
							round, strings.Join(r.args, " "), r.code, r.stderr)
					}
				}
				if ra.code != 0 && rb.code != 0 {
					t.Fatalf("round %d: both carves failed:\n%s\n%s", round, ra.stderr, rb.stderr)
				}
				// The last carve to succeed must be the one the GPU carries:
				// alone it is the one that exited 0; when both did, the
				// second found the first's vGPUs and removed them, so its
				// plan (and only its) has removal steps.
				won := carriedProfile(t, s, c.gpu)
				var last []result
				for _, r := range []result{ra, rb} {
					if r.code == 0 && (len(last) == 0 || removes(r.stdout)) {
						last = append(last, r)
					}
				}
				if ra.code == 0 && rb.code == 0 && removes(ra.stdout) == removes(rb.stdout) {
					t.Fatalf("round %d: both carves succeeded and they do not read as one after the other:\n%s\n%s", round, ra.stdout, rb.stdout)
				}
				want := profileArg(last[len(last)-1].args)
				if won != want {
					t.Fatalf("round %d: %s carries %q, but the carve that finished last asked for %s (a lost update)\n%s\n%s",
						round, c.gpu, won, want, ra.stdout, rb.stdout)
				}
				for _, r := range []result{ra, rb} {
					if r.code == 1 && r.stderr == "" {
						t.Fatalf("round %d: vgpuctl %s failed without saying why", round, strings.Join(r.args, " "))
					}
				}
				diffSnapshots(t, "the race won by "+won+" (against a lone carve)", refs[won], s.snapshot())
				s.vgpuctl("uncarve", c.gpu).ok(t)
			}
		})
	}
}

// carriedProfile is the one profile every vGPU of gpu carries, or "" when
// there are none; mixed profiles fail the test.
func carriedProfile(t testing.TB, s *sim, gpu string) string {
	t.Helper()
	vs := s.vgpusOf(t, gpu)
	if len(vs) == 0 {
		return ""
	}
	p := vs[0].Profile
	for _, v := range vs {
		if v.Profile != p {
			t.Fatalf("%s carries mixed profiles: %+v", gpu, vs)
		}
	}
	want := map[string]int{"mi25-4g": 4, "mi25-2g": 8, "t4-4q": 4, "t4-1q": 16}[p]
	if len(vs) != want {
		t.Fatalf("%s carries %s with %d vGPUs, want %d: %+v", gpu, p, len(vs), want, vs)
	}
	if vs[0].Kind != vgpu.KindVF && vs[0].Kind != vgpu.KindMdev {
		t.Fatalf("unexpected vGPU kind %s", vs[0].Kind)
	}
	return p
}

// removes: a carve's output lists steps that take vGPUs away (it re-split
// a GPU carved meanwhile).
func removes(stdout string) bool {
	return strings.Contains(stdout, "remove mdev") || strings.Contains(stdout, "sriov_numvfs to 0")
}

// profileArg is the --profile of a vgpuctl command line.
func profileArg(args []string) string {
	for i, a := range args {
		if a == "--profile" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
