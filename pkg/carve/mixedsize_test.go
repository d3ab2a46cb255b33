//go:build cgo

package carve_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// newMixedRig is an L40S on a vGPU 17+ host whose NVML is joined to the
// fake kernel: sriov-manage's rebind clears mixed-size mode, NVML refuses
// it while a vGPU exists, and the VFs take other sizes while it is on.
func newMixedRig(t *testing.T) *schedRig {
	t.Helper()
	s := newSchedRig(t, "l40s", simnvml.ModelL40S)
	s.k.SetMIG(s.nv)
	return s
}

func (s *schedRig) mixed(t *testing.T) bool {
	t.Helper()
	on, err := s.mgr.Manager.MixedSize(s.gpu)
	if err != nil {
		t.Fatal(err)
	}
	return on
}

// setMixed sets the mode as an admin would (nvidia-smi vgpu -shm).
func (s *schedRig) setMixed(t *testing.T, on bool) {
	t.Helper()
	if err := s.mgr.Manager.SetMixedSize(s.gpu, on); err != nil {
		t.Fatal(err)
	}
}

func (s *schedRig) sriovManage(t *testing.T, flag string) {
	t.Helper()
	if out, err := s.k.RunTool(context.Background(), "sriov-manage", flag, s.gpu.String()); err != nil {
		t.Fatalf("sriov-manage %s: %v: %s", flag, err, out)
	}
}

func opKinds(pl carve.Plan) []string {
	var kinds []string
	for _, o := range pl.Ops {
		if k := string(o.Kind); len(kinds) == 0 || kinds[len(kinds)-1] != k {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// TestMixedSizeCarve: on a fresh GPU (as at boot, when vgpud carves again)
// the mode is set after sriov-manage -e and before the first type; the
// same carve again changes nothing; the GPU then takes a vGPU of another
// size beside the profile's. From equal-size vGPUs of the same type, they
// go, the mode is set, and they come back.
func TestMixedSizeCarve(t *testing.T) {
	s := newMixedRig(t)
	res := s.mustDo(t, "l40s-12q-mixed")
	if want := []string{"sriov-manage", "nvidia-mixed-size", "driver", "nvidia-type"}; !reflect.DeepEqual(opKinds(res.Plan), want) {
		t.Fatalf("op order %v, want %v:\n%s", opKinds(res.Plan), want, res.Plan)
	}
	if !s.mixed(t) {
		t.Fatal("mixed-size mode off after the carve")
	}
	carriesShape(t, s.rig, "l40s-12q-mixed") // ProfileOf names the plain l40s-12q first
	if got := carve.ProfileOfSched(s.gpuNow(t), s.cat, s.mgr); got != "l40s-12q-mixed" {
		t.Fatalf("ProfileOfSched = %q, want l40s-12q-mixed (NVML shows the mode)", got)
	}
	s.checkSettled(t, "second carve", "l40s-12q-mixed")
	// A VF freed takes 1151, L40S-6Q: a second size, which equal-size
	// mode refuses.
	vf := pci.DevicePath(s.gpuNow(t).SRIOV.VFs[3].Address) + "/nvidia/current_vgpu_type"
	if err := s.k.WriteFile(vf, []byte("0")); err != nil {
		t.Fatal(err)
	}
	if err := s.k.WriteFile(vf, []byte("1151")); err != nil {
		t.Fatalf("a 6Q beside the 12Qs in mixed-size mode: %v", err)
	}

	t.Run("from equal-size", func(t *testing.T) {
		s := newMixedRig(t)
		s.mustDo(t, "l40s-12q")
		if got := carve.ProfileOfSched(s.gpuNow(t), s.cat, s.mgr); got != "l40s-12q" {
			t.Fatalf("ProfileOfSched in equal-size mode = %q, want l40s-12q", got)
		}
		res := s.mustDo(t, "l40s-12q-mixed")
		if want := []string{"nvidia-type", "nvidia-mixed-size", "nvidia-type"}; !reflect.DeepEqual(opKinds(res.Plan), want) {
			t.Fatalf("op order %v, want %v:\n%s", opKinds(res.Plan), want, res.Plan)
		}
		if !s.mixed(t) {
			t.Fatal("mixed-size mode off after the carve")
		}
		carriesShape(t, s.rig, "l40s-12q-mixed") // ProfileOf names the plain l40s-12q first
	})
}

// TestMixedSizeInUse: setting the mode on a GPU whose vGPU a VM holds is
// refused unless forced (NVML takes it only with no vGPU), host unchanged.
func TestMixedSizeInUse(t *testing.T) {
	ctx := context.Background()
	s := newMixedRig(t)
	s.mustDo(t, "l40s-12q")
	vf := s.gpuNow(t).SRIOV.VFs[2]
	hold(t, s.k, pci.GroupDevicePath(vf.IOMMUGroup))
	before := s.state(t)
	_, err := s.do(ctx, "l40s-12q-mixed", carve.Options{})
	checkBlockedBy(t, "mixed-size carve", err, vf.Address.String())
	checkUnchanged(t, "the refused carve", before, s.state(t))
}

// TestMixedSizeKept: an admin's mixed-size mode survives the sriov-manage
// runs of a carve and of an uncarve of a profile that does not ask for it;
// a carve that runs none leaves it alone.
func TestMixedSizeKept(t *testing.T) {
	ctx := context.Background()
	s := newMixedRig(t)
	s.setMixed(t, true) // before the VFs: sriov-manage -e would clear it
	res := s.mustDo(t, "l40s-12q")
	if want := []string{"sriov-manage", "nvidia-mixed-size", "driver", "nvidia-type"}; !reflect.DeepEqual(opKinds(res.Plan), want) {
		t.Fatalf("op order %v, want %v:\n%s", opKinds(res.Plan), want, res.Plan)
	}
	if !s.mixed(t) {
		t.Fatal("the carve's sriov-manage -e lost the admin's mixed-size mode")
	}
	if _, err := s.do(ctx, "l40s-24q", carve.Options{}); err != nil || !s.mixed(t) {
		t.Fatalf("re-split: %v, mixed-size %v", err, s.mixed(t))
	}
	if res, err := s.do(ctx, "", carve.Options{}); err != nil || !s.mixed(t) {
		t.Fatalf("uncarve: %v, mixed-size %v\n%s", err, s.mixed(t), res.Plan)
	}
	checkCarried(t, s.rig, "")

	// Without it, nothing is read back into place.
	s = newMixedRig(t)
	res, err := s.do(ctx, "l40s-12q", carve.Options{})
	if err != nil || strings.Contains(res.Plan.String(), "mixed-size") || s.mixed(t) {
		t.Fatalf("%v, mixed-size %v\n%s", err, s.mixed(t), res.Plan)
	}
}

// TestMixedSizeGoesWithMIG: a MIG-backed carve on a GPU an admin left in
// mixed-size mode turns MIG on, where NVML has no such mode: nothing
// tries to keep it.
func TestMixedSizeGoesWithMIG(t *testing.T) {
	m := newMIGRig(t)
	if err := m.mgr.Manager.SetMixedSize(migAddr, true); err != nil {
		t.Fatal(err)
	}
	res, err := m.do(context.Background(), "a100-1-5c", carve.Options{})
	if err != nil || strings.Contains(res.Plan.String(), "mixed-size") {
		t.Fatalf("%v\n%s", err, res.Plan)
	}
	checkCarried(t, m.rig, "a100-1-5c")
}

// TestMixedSizeRefusals: each is one line naming the GPU, the host as it
// was.
func TestMixedSizeRefusals(t *testing.T) {
	checkRefusals(t, newMixedRig, "l40s-12q-mixed", gpuAddr["l40s"], []refusal[*schedRig]{
		{"carver without NVML", func(t *testing.T, s *schedRig) {
			s.c = carve.New(s.rec, s.cat, s.store)
		}, nvstate.ErrUnavailable, "mixed-size mode is set by NVML"},
		{"GPU without the mode", func(t *testing.T, s *schedRig) {
			s.c = carve.New(s.rec, s.cat, s.store, carve.WithMIG(noMixedSize{s.mgr.Manager}))
		}, nvstate.ErrNotSupported, "the profile asks for mixed-size mode"},
		{"fixed-share scheduler on the GPU", func(t *testing.T, s *schedRig) {
			if err := s.mgr.Manager.SetScheduler(s.gpu, nvstate.Sched{Policy: nvstate.PolicyFixedShare}); err != nil {
				t.Fatal(err)
			}
		}, nvstate.ErrNotSupported, "fixed share"},
	})
}

// noMixedSize is NVML on a GPU without mixed-size mode (pre-Volta, which
// the fake does not model): NVML's NOT_SUPPORTED, as nvmlstate words it.
type noMixedSize struct{ nvstate.Manager }

func (noMixedSize) MixedSize(gpu pci.Address) (bool, error) {
	return false, fmt.Errorf("GPU %s: read its mixed-size mode: %w", gpu, nvstate.ErrNotSupported)
}

// TestMixedSizeUndoAtEveryStep fails each sysfs write and each NVML change
// of each change that sets or keeps the mode: the host (sysfs, NVML's
// scheduler and mode) is as it was.
func TestMixedSizeUndoAtEveryStep(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, s *schedRig)
		prof  string
	}{
		{"fresh to mixed", func(*testing.T, *schedRig) {}, "l40s-12q-mixed"},
		{"equal-size to mixed", func(t *testing.T, s *schedRig) {
			s.mustDo(t, "l40s-12q")
		}, "l40s-12q-mixed"},
		{"admin's mode kept over -e", func(t *testing.T, s *schedRig) { s.setMixed(t, true) }, "l40s-6q"},
		{"admin's mode kept over -d", func(t *testing.T, s *schedRig) {
			s.sriovManage(t, "-e")
			s.setMixed(t, true)
		}, ""},
	} {
		prepare := func(t *testing.T) *schedRig {
			s := newMixedRig(t)
			c.setup(t, s)
			s.mgr.calls = 0
			return s
		}
		t.Run(c.name, func(t *testing.T) {
			writes, changes := prepare(t).changeSteps(t, c.prof)
			// byTool: the fault hits a write of sriov-manage, which goes on
			// past it; the change may then succeed.
			fail := func(t *testing.T, inject func(*schedRig), what string, byTool bool) {
				t.Helper()
				s := prepare(t)
				before := s.state(t)
				inject(s)
				_, err := s.do(ctx, c.prof, carve.Options{})
				if err == nil && byTool {
					if !s.mixed(t) {
						t.Fatalf("%s: the script went on, and the carve left mixed-size mode off", what)
					}
					return
				}
				checkUndone(t, what, err, before, s.state(t))
			}
			for i := 1; i <= changes; i++ {
				fail(t, func(s *schedRig) { s.mgr.failAt = i }, fmt.Sprintf("NVML change %d of %d", i, changes), false)
			}
			for i, w := range writes {
				fail(t, func(s *schedRig) { failWrite(s.k, writes, i) }, fmt.Sprintf("write %d of %d (%s <- %q)", i+1, len(writes), w.Path, w.Data), w.Tool != "")
			}
		})
	}
}
