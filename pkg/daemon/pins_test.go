package daemon

import (
	"slices"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/mdev"
)

// Pinned mdev UUIDs of the tests, as vgpuctl import mdevctl writes them.
const (
	pinA = "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44"
	pinB = "a1b2c3d4-0000-4000-8000-00000000000a"
	pinC = "2f1e0d9c-8b7a-4c6d-9e5f-4a3b2c1d0e9f"
)

const cfgPinned = `version: v1
gpus:
  - address: "0000:3b:00.0"
    profile: t4-4q
    mdev-uuids: [` + pinA + `, ` + pinB + `]
  - parent: mbochs
    profile: lab-mbochs-64m
    mdev-uuids: [` + pinC + `]
`

// The config's pinned UUIDs exist after vgpud's start and again after a
// reboot; vgpud never hands a pinned mdev to a vGPU request (a swap would
// take its UUID from the domain that names it), and brings a domain's
// mdevs back after the reboot from the unpinned ones.
func TestPinnedMdevUUIDs(t *testing.T) {
	k := mbochsKernel(t)
	r := start(t, k, cfgPinned, labProfiles)
	check := func(when string) {
		t.Helper()
		for u, where := range map[string]string{pinA: "0000:3b:00.0/nvidia-232", pinB: "0000:3b:00.0/nvidia-232", pinC: "mbochs/mbochs-large"} {
			in, ok, err := mdev.Get(r.k, u)
			if err != nil || !ok || in.Parent+"/"+in.Type != where {
				t.Fatalf("%s: pinned %s = %+v, %v, %v; want on %s", when, u, in, ok, err, where)
			}
		}
	}
	check("after start")

	// Two of the T4's four mdevs are pinned: two are left for requests.
	if _, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "t4-4q", Count: 3}); err == nil {
		t.Fatal("reserved 3 t4-4q vGPUs: a pinned mdev was handed out")
	}
	res, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "t4-4q", Count: 2})
	if err != nil || len(res.Allocations) != 2 {
		t.Fatalf("reserve 2 = %+v, %v", res, err)
	}
	for _, a := range res.Allocations {
		if a.VGPU == pinA || a.VGPU == pinB {
			t.Fatalf("reserved pinned %s", a.VGPU)
		}
	}
	if _, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "t4-4q", VGPUs: []string{mdevA0, mdevA1}}); err != nil {
		t.Fatal(err)
	}
	// mbochs: a domain's mdev is swapped from an unpinned one.
	if _, err := r.c.Prepare(bg, domB, api.PrepareRequest{Name: "db01", Profile: "lab-mbochs-64m", VGPUs: []string{mdevB0}}); err != nil {
		t.Fatal(err)
	}
	check("after the prepares")

	// A reboot: every mdev is gone; the ledger stays.
	r.k = mbochsKernel(t)
	r.restart()
	check("after a reboot")
	for _, u := range []string{mdevA0, mdevA1, mdevB0} {
		if _, ok, _ := mdev.Get(r.k, u); !ok {
			t.Fatalf("after a reboot the domain's mdev %s is not back", u)
		}
	}
	ins, err := mdev.Instances(r.k)
	if err != nil {
		t.Fatal(err)
	}
	var t4 []string
	for _, in := range ins {
		if in.Parent == "0000:3b:00.0" {
			t4 = append(t4, in.UUID)
		}
	}
	slices.Sort(t4)
	want := []string{mdevA0, mdevA1, pinA, pinB}
	slices.Sort(want)
	if !slices.Equal(t4, want) {
		t.Fatalf("T4 mdevs after the reboot %v, want %v", t4, want)
	}
	rep, err := r.c.Reconcile(bg)
	if err != nil || rep.Changed != 0 || !rep.OK() {
		t.Fatalf("reconcile after the reboot = %+v, %v", rep, err)
	}
}
