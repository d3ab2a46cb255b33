package engine

import (
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// TestClaimPodReadsNoCountedType: the device plugin's Allocate (ClaimPod)
// labels the T4 from a lean read (viewOf): no mdev type's
// available_instances, as each states its max_instance; the labels are
// checked against the full read in pkg/carve (checkLeanLabel).
func TestClaimPodReadsNoCountedType(t *testing.T) {
	var cnt *sysfstest.Counter
	r := unstartedEngineRig(t, "mixed.yaml", cfgMixed, func(k *simkernel.Kernel) sysfs.FS {
		cnt = sysfstest.Count(k)
		return cnt
	})
	if rep := r.e.Start(bg); !rep.OK() {
		t.Fatalf("first start: %+v", rep)
	}
	id := t4Pool(t, r.e)[0]
	cnt.Take()
	if _, err := r.e.ClaimPod(bg, podClaim(claimA, id), []string{id}); err != nil {
		t.Fatal(err)
	}
	as := cnt.Take()
	types := 0
	for _, a := range as {
		switch {
		case strings.HasSuffix(a.Path, "/available_instances"):
			t.Errorf("a claim of %s read %s", id, a.Path)
		case strings.HasSuffix(a.Path, "/mdev_supported_types"):
			types++
		}
	}
	if types == 0 {
		t.Fatalf("a claim of %s listed no mdev types (%d accesses): the view read no mdev GPU", id, len(as))
	}
	t.Logf("kernel accesses: claim %d", len(as))
}
