package daemon

import (
	"errors"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// labProfiles is the real-kernel lab's test catalog: profiles for the
// kernel's mbochs sample, a virtual mdev parent.
const labProfiles = "../../e2e/lab/profiles"

const cfgMbochs = `version: v1
gpus:
  - parent: mbochs
    profile: lab-mbochs-64m
  - address: "0000:3b:00.0"
    profile: t4-4q
on-release: destroy
`

func mbochsKernel(t *testing.T) *simkernel.Kernel {
	t.Helper()
	k, err := simkernel.New(simkernel.Host{Version: simkernel.HostVersion, GPUs: []simkernel.HostGPU{
		{Model: simkernel.ModelMbochs},
		{Model: simkernel.ModelT4, Address: pci.MustParseAddress("0000:3b:00.0")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mbochsLarge(t *testing.T, k *simkernel.Kernel) []string {
	t.Helper()
	types, err := mdev.Types(k, "mbochs")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ty := range types {
		if ty.ID != "mbochs-large" {
			if len(ty.Instances) > 0 {
				t.Errorf("mbochs has %d mdevs of %s", len(ty.Instances), ty.ID)
			}
			continue
		}
		out = append(out, ty.Instances...)
	}
	return out
}

// A virtual mdev parent named by the config is carved at start, its mdevs
// are vGPUs of the profile, and a domain's mdev goes through the whole
// lifecycle: reserve, prepare (swap to the domain's identity), release
// (destroy, then the parent is made whole), and the parent is uncarved once
// the config drops it.
func TestParentLifecycle(t *testing.T) {
	k := mbochsKernel(t)
	r := start(t, k, cfgMbochs, labProfiles)
	if got := mbochsLarge(t, k); len(got) != 4 {
		t.Fatalf("mbochs after start: %d mbochs-large mdevs, want 4", len(got))
	}
	carved, _ := r.d.ledger.CarvedGPUs()
	var rec *ledger.Carved
	for i := range carved {
		if carved[i].Parent == "mbochs" {
			rec = &carved[i]
		}
	}
	if len(carved) != 2 || rec == nil || rec.Profile != "lab-mbochs-64m" || !rec.GPU.IsZero() {
		t.Fatalf("carved records: %+v", carved)
	}
	vs, err := r.c.VGPUs(bg)
	if err != nil {
		t.Fatal(err)
	}
	got := countBy(vs, func(v api.VGPU) string { return v.GPU + "/" + v.Profile + "/" + string(v.Kind) + "/" + v.State })
	if got["mbochs/lab-mbochs-64m/mdev/free"] != 4 || got["0000:3b:00.0/t4-4q/mdev/free"] != 4 || len(vs) != 8 {
		t.Fatalf("vGPUs after start: %v", got)
	}
	rep, err := r.c.Reconcile(bg)
	if err != nil || rep.Changed != 0 || !rep.OK() || len(rep.GPUs) != 2 {
		t.Fatalf("second reconcile = %+v, %v", rep, err)
	}

	res, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "lab-mbochs-64m", Count: 1})
	if err != nil || len(res.Allocations) != 1 || res.Allocations[0].Kind != "mdev" || res.Allocations[0].GPU != "mbochs" {
		t.Fatalf("reserve = %+v, %v", res, err)
	}
	carvedM := res.Allocations[0].VGPU
	prep, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "lab-mbochs-64m", VGPUs: []string{mdevA0}})
	if err != nil || len(prep.Allocations) != 1 || prep.Allocations[0].VGPU != mdevA0 || prep.Allocations[0].State != "attached" ||
		prep.Allocations[0].GPU != "mbochs" {
		t.Fatalf("prepare = %+v, %v", prep, err)
	}
	if _, ok, _ := mdev.Get(k, carvedM); ok {
		t.Fatalf("the reserved mdev %s still exists after the swap", carvedM)
	}
	in, ok, _ := mdev.Get(k, mdevA0)
	if !ok || in.Parent != "mbochs" || in.Type != "mbochs-large" {
		t.Fatalf("mdev %s after prepare: %+v, %v", mdevA0, in, ok)
	}
	if as := r.allocations(); len(as) != 1 || as[0].Parent != "mbochs" || !as[0].GPU.IsZero() || as[0].State != ledger.StateAttached {
		t.Fatalf("ledger after prepare: %+v", as)
	}
	// Another domain fits on the rest; more than the parent has does not.
	if _, err := r.c.Reserve(bg, domB, api.ReserveRequest{Name: "db01", Profile: "lab-mbochs-64m", Count: 4}); err == nil {
		t.Fatal("reserved 4 of the 3 free mbochs mdevs")
	}
	if _, err := r.c.Prepare(bg, domB, api.PrepareRequest{Name: "db01", Profile: "lab-mbochs-64m", VGPUs: []string{mdevB0}}); err != nil {
		t.Fatal(err)
	}

	rel, err := r.c.Release(bg, domA, api.ReleaseRequest{Name: "web01"})
	if err != nil || rel.Policy != "destroy" || len(rel.Destroyed) != 1 || rel.Destroyed[0] != mdevA0 {
		t.Fatalf("release = %+v, %v", rel, err)
	}
	if _, ok, _ := mdev.Get(k, mdevA0); ok {
		t.Fatalf("mdev %s still exists after a destroying release", mdevA0)
	}
	if got := mbochsLarge(t, k); len(got) != 4 {
		t.Fatalf("mbochs after the release: %d mbochs-large mdevs, want 4 (made whole)", len(got))
	}
	if as := r.allocations(); len(as) != 1 || as[0].VGPU != mdevB0 || as[0].Parent != "mbochs" {
		t.Fatalf("ledger after the release: %+v", as)
	}

	// A restart after a reboot that lost db01's mdev brings it back.
	if err := mdev.Remove(k, mdevB0); err != nil {
		t.Fatal(err)
	}
	r.restart()
	if _, ok, _ := mdev.Get(k, mdevB0); !ok {
		t.Fatalf("mdev %s of db01 not restored at start", mdevB0)
	}
	if got := mbochsLarge(t, k); len(got) != 4 {
		t.Fatalf("mbochs after the restore: %d mbochs-large mdevs, want 4", len(got))
	}

	// Dropped from the config: in use, so refused; once free, uncarved.
	if _, err := r.c.Apply(bg, []byte("version: v1\ngpus:\n  - address: \"0000:3b:00.0\"\n    profile: t4-4q\n"), false); err != nil {
		t.Fatal(err)
	}
	if got := mbochsLarge(t, k); len(got) != 4 {
		t.Fatalf("mbochs uncarved while db01 holds one: %d mdevs left", len(got))
	}
	if _, err := r.c.Release(bg, domB, api.ReleaseRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Unreserve(bg, domB, ""); err != nil {
		t.Fatal(err)
	}
	if rep, err := r.c.Reconcile(bg); err != nil || !rep.OK() {
		t.Fatalf("reconcile = %+v, %v", rep, err)
	}
	if got := mbochsLarge(t, k); len(got) != 0 {
		t.Fatalf("mbochs after the config dropped it: %d mdevs left", len(got))
	}
	carved, _ = r.d.ledger.CarvedGPUs()
	if len(carved) != 1 || carved[0].Parent != "" {
		t.Fatalf("carved records after the drop: %+v", carved)
	}
}

// vgpuctl carve and uncarve of a virtual parent go through vgpud's API
// like a GPU's, under its host lock and in a ledger intent: with vgpud
// running there is one path to the host. The carved mdevs are listed.
// Bad names are refused as such.
func TestParentCarveThroughAPI(t *testing.T) {
	k := mbochsKernel(t)
	r := start(t, k, "version: v1\ngpus:\n  - address: \"0000:3b:00.0\"\n    profile: t4-4q\n", labProfiles)
	if got := mbochsLarge(t, k); len(got) != 0 {
		t.Fatalf("mbochs before the carve: %v", got)
	}
	dry, err := r.c.Carve(bg, api.CarveRequest{Parent: "mbochs", Profile: "lab-mbochs-64m", DryRun: true})
	if err != nil || len(dry.Plan.Ops) != 4 || len(mbochsLarge(t, k)) != 0 {
		t.Fatalf("dry-run carve: %+v, %v", dry, err)
	}
	res, err := r.c.Carve(bg, api.CarveRequest{Parent: "mbochs", Profile: "lab-mbochs-64m"})
	if err != nil || res.Applied != 4 || res.Plan.Parent != "mbochs" {
		t.Fatalf("carve mbochs through vgpud: %+v, %v", res, err)
	}
	if got := mbochsLarge(t, k); len(got) != 4 {
		t.Fatalf("mbochs after the carve: %d mdevs, want 4", len(got))
	}
	if in, err := r.d.ledger.OpenIntents(); err != nil || len(in) != 0 {
		t.Fatalf("open intents after the carve: %v, %v", in, err)
	}
	// Its mdevs are listed though the config does not name mbochs, also
	// after a SIGHUP, and can be reserved.
	listed := func(when string) {
		t.Helper()
		vs, err := r.c.VGPUs(bg)
		if err != nil {
			t.Fatal(err)
		}
		got := countBy(vs, func(v api.VGPU) string { return v.GPU + "/" + v.Profile + "/" + string(v.Kind) + "/" + v.State })
		if got["mbochs/lab-mbochs-64m/mdev/free"] != 4 {
			t.Fatalf("vGPUs %s: %v; want 4 free lab-mbochs-64m mdevs of mbochs", when, got)
		}
	}
	listed("after the carve")
	if _, err := r.d.Reload(bg); err != nil {
		t.Fatal(err)
	}
	listed("after a reload")
	if h, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "lab-mbochs-64m", Count: 1}); err != nil ||
		len(h.Allocations) != 1 || h.Allocations[0].GPU != "mbochs" {
		t.Fatalf("reserve on the carved mbochs = %+v, %v", h, err)
	}
	if _, err := r.c.Unreserve(bg, domA, ""); err != nil {
		t.Fatal(err)
	}
	res, err = r.c.Uncarve(bg, api.UncarveRequest{Parent: "mbochs"})
	if err != nil || res.Applied != 4 || len(mbochsLarge(t, k)) != 0 {
		t.Fatalf("uncarve mbochs through vgpud: %+v, %v", res, err)
	}
	for _, tc := range []struct {
		req  api.CarveRequest
		kind error
	}{
		{api.CarveRequest{Parent: "nosuch", Profile: "lab-mbochs-64m"}, client.ErrNotFound},
		{api.CarveRequest{Parent: "../mbochs", Profile: "lab-mbochs-64m"}, client.ErrBadRequest},
		{api.CarveRequest{GPU: "0000:3b:00.0", Parent: "mbochs", Profile: "lab-mbochs-64m"}, client.ErrBadRequest},
		{api.CarveRequest{Parent: "mbochs", Profile: "t4-4q"}, client.ErrBadRequest},
	} {
		if _, err := r.c.Carve(bg, tc.req); !errors.Is(err, tc.kind) {
			t.Errorf("carve %+v: %v, want %v", tc.req, err, tc.kind)
		}
	}
}
