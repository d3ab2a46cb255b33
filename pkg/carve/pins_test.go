package carve_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Pinned mdev UUIDs, as a host config's mdev-uuids gives them.
const (
	pinA = "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44"
	pinB = "a1b2c3d4-0000-4000-8000-00000000000a"
)

// mdevsOf lists the host's mdevs as "UUID TYPE PARENT", sorted.
func mdevsOf(t *testing.T, k *simkernel.Kernel) []string {
	t.Helper()
	ins, err := mdev.Instances(k)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, in := range ins {
		out = append(out, in.UUID+" "+in.Type+" "+in.Parent)
	}
	slices.Sort(out)
	return out
}

// hasMdev says whether the mdev exists with type typ (on parent, unless "").
func hasMdev(t *testing.T, k *simkernel.Kernel, u, typ, parent string) bool {
	t.Helper()
	in, ok, err := mdev.Get(k, u)
	if err != nil {
		t.Fatal(err)
	}
	return ok && in.Type == typ && (parent == "" || in.Parent == parent)
}

// A pinned carve makes the pinned UUIDs and derives the rest; it is as
// wanted at once after; a reboot (a fresh kernel) and the same carve give
// the very same mdevs, for mdevs on the GPU (T4) and one per VF (A100
// under vGPU 16).
func TestPinnedUUIDsSurviveReboot(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ model, prof, typ string }{
		{"t4", "t4-4q", "nvidia-232"},
		{"a100", "a100-20c", "nvidia-472"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			pins := []string{pinA, pinB}
			var first []string
			var r *rig
			for boot := range 2 {
				r = newRig(t, tc.model) // each rig is a freshly booted host
				res, err := r.do(ctx, tc.prof, carve.Options{MdevUUIDs: pins})
				if err != nil {
					t.Fatalf("boot %d: %v\nplan:\n%s", boot, err, res.Plan)
				}
				for _, u := range pins {
					if !hasMdev(t, r.k, u, tc.typ, "") {
						t.Fatalf("boot %d: pinned %s is not an mdev of %s: %v", boot, u, tc.typ, mdevsOf(t, r.k))
					}
				}
				checkCarried(t, r, tc.prof)
				again, err := r.do(ctx, tc.prof, carve.Options{MdevUUIDs: pins})
				if err != nil || !again.Plan.Empty() {
					t.Fatalf("boot %d: carve again: %v, plan:\n%s", boot, err, again.Plan)
				}
				got := mdevsOf(t, r.k)
				if boot == 0 {
					first = got
				} else if !slices.Equal(got, first) {
					t.Fatalf("after a reboot the carve made\n%s\nbefore it\n%s", strings.Join(got, "\n"), strings.Join(first, "\n"))
				}
			}
			// The pins take the first places of the pool: on the A100 the
			// first VFs, in order.
			if tc.model == "a100" {
				g := r.gpuNow(t)
				for i, u := range pins {
					if vf := g.SRIOV.VFs[i].Address.String(); !hasMdev(t, r.k, u, tc.typ, vf) {
						t.Errorf("pin %d (%s) is not on VF %d (%s): %v", i, u, i, vf, mdevsOf(t, r.k))
					}
				}
			}
		})
	}
}

// An mdev of the profile's type with a pinned UUID is adopted where it
// is, never removed and made again; a pin still missing takes the place of
// an unpinned mdev.
func TestPinnedUUIDAdopted(t *testing.T) {
	ctx := context.Background()
	t.Run("t4", func(t *testing.T) {
		r := newRig(t, "t4")
		if err := mdev.Create(r.k, r.gpu.String(), "nvidia-232", pinB); err != nil {
			t.Fatal(err)
		}
		res, err := r.do(ctx, "t4-4q", carve.Options{MdevUUIDs: []string{pinA, pinB}})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range res.Plan.Ops {
			if o.UUID == pinB {
				t.Errorf("the carve touched the adopted mdev: %s", o)
			}
		}
		if res.Applied != 3 || !hasMdev(t, r.k, pinA, "nvidia-232", r.gpu.String()) || !hasMdev(t, r.k, pinB, "nvidia-232", r.gpu.String()) {
			t.Fatalf("applied %d ops (want 3 creates), mdevs %v", res.Applied, mdevsOf(t, r.k))
		}
		// The derived ones fill the places after the pins.
		for i := 2; i < 4; i++ {
			if !hasMdev(t, r.k, carve.MdevUUID(r.gpu.String(), "nvidia-232", i), "nvidia-232", "") {
				t.Errorf("derived mdev %d missing: %v", i, mdevsOf(t, r.k))
			}
		}
	})
	t.Run("a100", func(t *testing.T) {
		r := newRigCarved(t, "a100", "a100-20c", nil)
		g := r.gpuNow(t)
		vf1 := g.SRIOV.VFs[1].Address.String()
		derived1 := g.SRIOV.VFs[1].MdevTypes[0].Instances
		for _, ty := range g.SRIOV.VFs[1].MdevTypes {
			for _, u := range ty.Instances {
				if err := mdev.Remove(r.k, u); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := mdev.Create(r.k, vf1, "nvidia-472", pinB); err != nil {
			t.Fatalf("create %s on VF 1 (had %v): %v", pinB, derived1, err)
		}
		res, err := r.do(ctx, "a100-20c", carve.Options{MdevUUIDs: []string{pinA, pinB}})
		if err != nil {
			t.Fatal(err)
		}
		var ops []string
		for _, o := range res.Plan.Ops {
			ops = append(ops, o.String())
			if o.UUID == pinB {
				t.Errorf("the carve touched the adopted mdev: %s", o)
			}
		}
		// VF 0's unpinned mdev makes way for pinA; pinB stays on VF 1.
		if len(ops) != 2 || !strings.HasPrefix(ops[0], "remove mdev ") || !strings.HasPrefix(ops[1], "create mdev "+pinA) {
			t.Fatalf("ops:\n%s", strings.Join(ops, "\n"))
		}
		if !hasMdev(t, r.k, pinB, "nvidia-472", vf1) || !hasMdev(t, r.k, pinA, "nvidia-472", g.SRIOV.VFs[0].Address.String()) {
			t.Fatalf("mdevs %v", mdevsOf(t, r.k))
		}
	})
}

// A pinned UUID held by an mdev of another type on the GPU is made again
// with the profile's type, and refused while a VM holds it; one that lives
// on another parent is refused before anything is written.
func TestPinnedUUIDWrongTypeOrPlace(t *testing.T) {
	ctx := context.Background()
	t4 := gpuAddr["t4"]
	a100 := gpuAddr["a100"]
	r := newRigOn(t, simkernel.Host{Version: "v1", NVIDIADriver: "535.230.02", GPUs: []simkernel.HostGPU{{Model: "t4", Address: t4}, {Model: "a100", Address: a100}}}, t4)
	if _, err := r.do(ctx, "t4-8q", carve.Options{MdevUUIDs: []string{pinA}}); err != nil {
		t.Fatal(err)
	}
	if !hasMdev(t, r.k, pinA, "nvidia-233", t4.String()) {
		t.Fatalf("mdevs %v", mdevsOf(t, r.k))
	}
	in, _, _ := mdev.Get(r.k, pinA)
	h, err := r.k.Open("/dev/vfio/" + strconv.Itoa(in.IOMMUGroup))
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, r.k)
	_, err = r.do(ctx, "t4-4q", carve.Options{MdevUUIDs: []string{pinA}})
	var iu *carve.InUseError
	if !errors.As(err, &iu) || !slices.ContainsFunc(iu.Blocked, func(b vgpu.Blocker) bool { return b.VGPU == pinA }) {
		t.Fatalf("re-type of pinned %s in use: %v", pinA, err)
	}
	checkUnchanged(t, "the refused carve", before, snapshot(t, r.k))
	h.Close()
	if _, err := r.do(ctx, "t4-4q", carve.Options{MdevUUIDs: []string{pinA}}); err != nil {
		t.Fatal(err)
	}
	if !hasMdev(t, r.k, pinA, "nvidia-232", t4.String()) {
		t.Fatalf("pinned %s not re-made as nvidia-232: %v", pinA, mdevsOf(t, r.k))
	}

	// pinA lives on the T4: the A100 may not have it.
	n := len(r.rec.Writes())
	_, err = r.c.Carve(ctx, vgpu.GPU(a100), "a100-20c", carve.Options{MdevUUIDs: []string{pinA}})
	if !errors.Is(err, carve.ErrPinnedElsewhere) || !strings.Contains(err.Error(), "exists on "+t4.String()+" (type nvidia-232)") {
		t.Fatalf("pin held by another GPU: %v", err)
	}
	if len(r.rec.Writes()) != n {
		t.Fatalf("the refused carve wrote %d times", len(r.rec.Writes())-n)
	}
	// Pins the profile cannot hold are refused too.
	for pins, want := range map[string]string{
		pinA + "," + pinB: "2 mdev UUIDs pinned, more than the profile's split (1)",
		"not-a-uuid":      "pinned mdev UUID",
	} {
		_, err := r.c.Carve(ctx, vgpu.GPU(a100), "a100-40c", carve.Options{MdevUUIDs: strings.Split(pins, ",")})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("pins %s: %v, want %q", pins, err, want)
		}
	}
}

// A fault at any write of a pinned re-carve (a pinned mdev of another
// type made again, another pin made, the rest derived) leaves the host as
// it was.
func TestPinnedUndoAtEveryStep(t *testing.T) {
	ctx := context.Background()
	prepare := func() *rig { return newRigCarved(t, "t4", "t4-8q", []string{pinA}) }
	change := carve.Options{MdevUUIDs: []string{pinB, pinA}}
	writes := changeWrites(t, prepare(), "t4-4q", change)
	if len(writes) < 5 {
		t.Fatalf("the change made %d writes", len(writes))
	}
	for i, w := range writes {
		r := prepare()
		before := snapshot(t, r.k)
		failWrite(r.k, writes, i)
		_, err := r.do(ctx, "t4-4q", change)
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("write %d (%s): err = %v", i+1, w.Path, err)
		}
		checkUndone(t, fmt.Sprintf("write %d (%s <- %q)", i+1, w.Path, w.Data), err, before, snapshot(t, r.k))
	}
}

// A virtual parent's pool takes pins too.
func TestPinnedVirtualParent(t *testing.T) {
	ctx := context.Background()
	k, c := mbochsCarver(t, nil)
	if _, err := c.Carve(ctx, vgpu.Parent("mbochs"), "mbochs-64m", carve.Options{MdevUUIDs: []string{pinA}}); err != nil {
		t.Fatal(err)
	}
	if !hasMdev(t, k, pinA, "mbochs-large", "mbochs") || len(mdevsOf(t, k)) != 4 {
		t.Fatalf("mdevs %v", mdevsOf(t, k))
	}
	if _, ok, _ := mdev.Get(k, carve.MdevUUID("mbochs", "mbochs-large", 0)); ok {
		t.Error("the pin did not take place 0 of the pool")
	}
	if res, err := c.Carve(ctx, vgpu.Parent("mbochs"), "mbochs-64m", carve.Options{MdevUUIDs: []string{pinA}}); err != nil || !res.Plan.Empty() {
		t.Fatalf("again: %v, plan %s", err, res.Plan)
	}
}
