package daemon

import (
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/api"
)

// What a stop through the hook (release, keep) may cost the kernel,
// counted on the fake kernel as each case's prepare is: each access is a
// FUSE round trip on vgpusim, a syscall or more on a real host. Measured
// when set: 0 for an mdev, 6 for a VF.
const maxReleaseAccesses = 12

// TestPrepareReadsOnlyItsGPU pins how many kernel accesses a prepare and a
// release (keep) of a domain's vGPU make, and that they read only that
// vGPU's GPU: the cost of a VM start must not grow with the host, nor
// silently come back (an mdev's were 290 and 135 when each prepare read its GPU
// twice and each release once more).
func TestPrepareReadsOnlyItsGPU(t *testing.T) {
	k := simkernel.NewExample(t, "mixed.yaml")
	cnt := sysfstest.Count(k)
	r := newRig(t, k, cfgMixed)
	r.fs = cnt
	r.run()
	vf := r.reserveVF(t)
	others := map[string][]string{ // the GPUs a prepare on each must not read
		"0000:3b:00.0": {"0000:03:00.0", "0000:86:", "0000:00:02.0"},
		"0000:86:00.0": {"0000:03:00.0", "0000:3b:00.0", "0000:00:02.0"},
	}
	// maxPrepare: measured when set, 32 (the T4: 17 mdev types, 4 mdevs;
	// each type's fixed attributes read once per registration of the GPU,
	// its available_instances not at all (each states max_instance:
	// mdev.Counted), its mdevs listed from the GPU's directory, each
	// mdev's group and driver read, not its parent and type again; whether
	// the GPU is there asked only when its ids are not, its VFs listed
	// only when it has some) and 243 (the L40S: 32 VFs), each a bound: one
	// access more fails, so that a cost that comes back is seen (lower the
	// bound where a change cuts one). Before: 49 (59, 136 before that) and
	// 244 (253).
	for _, tc := range []struct {
		name, dom, domName, profile, id, gpu string
		maxPrepare                           int
	}{
		{"mdev", domB, "db01", "t4-4q", mdevB0, "0000:3b:00.0", 32},
		{"nvidia VF", domA, "gpu01", "l40s-12q", vf, "0000:86:00.0", 243},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prep := func() {
				t.Helper()
				if _, err := r.c.Prepare(bg, tc.dom, api.PrepareRequest{Name: tc.domName, Profile: tc.profile, VGPUs: []string{tc.id}}); err != nil {
					t.Fatal(err)
				}
			}
			rel := func() api.ReleaseResult {
				t.Helper()
				res, err := r.c.Release(bg, tc.dom, api.ReleaseRequest{Name: tc.domName})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			prep() // the first start may swap or ready: not what is pinned
			rel()
			cnt.Take()
			prep()
			p := cnt.Take()
			res := rel()
			q := cnt.Take()
			t.Logf("kernel accesses: prepare %d, release %d", len(p), len(q))
			if len(p) > tc.maxPrepare {
				t.Errorf("a prepare of %s made %d kernel accesses, want <= %d", tc.id, len(p), tc.maxPrepare)
			}
			if len(q) > maxReleaseAccesses {
				t.Errorf("a release (keep) of %s made %d kernel accesses, want <= %d", tc.id, len(q), maxReleaseAccesses)
			}
			for _, a := range append(p, q...) {
				for _, o := range others[tc.gpu] {
					if strings.Contains(a.Path, o) {
						t.Errorf("a prepare or release of %s on %s read another GPU: %s %s", tc.id, tc.gpu, a.Op, a.Path)
					}
				}
			}
			// The answers are as before: the vGPU, its kind, kept reserved.
			if len(res.Kept) != 1 || res.Kept[0].VGPU != tc.id || res.Kept[0].State != "reserved" || res.Kept[0].Kind == "" {
				t.Fatalf("release = %+v", res)
			}
		})
	}
}

// reserveVF reserves an L40S VF for domA (gpu01) and returns its address.
func (r *rig) reserveVF(t *testing.T) string {
	t.Helper()
	res, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "gpu01", Profile: "l40s-12q", Count: 1})
	if err != nil || len(res.Allocations) != 1 {
		t.Fatalf("reserve an L40S VF = %+v, %v", res, err)
	}
	return res.Allocations[0].VGPU
}
