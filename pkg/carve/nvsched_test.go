//go:build cgo

package carve_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// schedRig is a rig on one NVIDIA GPU (model of the fake kernel) whose
// NVML (simnvml, model nvModel) is joined to the kernel: it counts the
// GPU's vGPUs, and refuses a scheduler change while there is any.
type schedRig struct{ *nvRig }

func newSchedRig(t *testing.T, model, nvModel string) *schedRig {
	t.Helper()
	s := &schedRig{newNVRig(t, newRig(t, model), nvModel)}
	s.nv.SetVGPUs(s.k.VGPUs)
	s.c = carve.New(s.rec, s.cat, s.store, carve.WithLocker(carve.NewLocker(t.TempDir())), carve.WithMIG(s.mgr))
	return s
}

func (s *schedRig) sched(t *testing.T) nvstate.Sched {
	t.Helper()
	sc, err := s.mgr.Manager.Scheduler(s.gpu)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// state is the whole host: sysfs, NVML's scheduler and mixed-size mode.
func (s *schedRig) state(t *testing.T) map[string]string {
	t.Helper()
	st := snapshot(t, s.k)
	st["nvml:scheduler"] = fmt.Sprintf("%+v", s.sched(t))
	st["nvml:mixed-size"] = fmt.Sprint(s.mixed(t))
	return st
}

// TestNVSchedulerCarve: a profile's scheduler is set before its vGPUs are
// made; changing it on a carved GPU re-creates the vGPUs around it (NVML
// takes it only while none exists); the same carve again changes nothing.
func TestNVSchedulerCarve(t *testing.T) {
	ctx := context.Background()
	s := newSchedRig(t, "t4", simnvml.ModelT4)
	if sc := s.sched(t); sc.Policy != nvstate.PolicyBestEffort {
		t.Fatalf("scheduler at driver load = %+v", sc)
	}
	s.mustDo(t, "t4-4q")
	// NVML refuses while the 4 mdevs exist.
	if err := s.mgr.Manager.SetScheduler(s.gpu, nvstate.Sched{Policy: nvstate.PolicyEqualShare}); err == nil {
		t.Fatal("NVML set the scheduler while vGPUs exist")
	}
	res, err := s.do(ctx, "t4-4q-equal", carve.Options{})
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Plan)
	}
	if sc := s.sched(t); sc.Policy != nvstate.PolicyEqualShare {
		t.Fatalf("scheduler after t4-4q-equal = %+v", sc)
	}
	var kinds []carve.OpKind
	for _, o := range res.Plan.Ops {
		kinds = append(kinds, o.Kind)
	}
	if want := "[mdev-remove mdev-remove mdev-remove mdev-remove nvidia-scheduler mdev-create mdev-create mdev-create mdev-create]"; fmt.Sprint(kinds) != want {
		t.Fatalf("plan ops %v, want %s:\n%s", kinds, want, res.Plan)
	}
	carriesShape(t, s.rig, "t4-4q-equal")
	s.checkSettled(t, "the same carve again", "t4-4q-equal")
	// Back to a profile without a scheduler: the scheduler stays (only a
	// driver reload resets it), nothing is re-created.
	s.checkSettled(t, "t4-4q after t4-4q-equal", "t4-4q")

	// Per-VF types (L40S): a fixed share in strict 2 ms slices.
	l := newSchedRig(t, "l40s", simnvml.ModelL40S)
	l.mustDo(t, "l40s-12q-fixed")
	if sc := l.sched(t); sc.Policy != nvstate.PolicyFixedShare || sc.ARR != nvstate.ARRDisable || sc.TimesliceNS != 2_000_000 {
		t.Fatalf("L40S scheduler = %+v, want fixed share, ARR off, 2 ms", sc)
	}
	carriesShape(t, l.rig, "l40s-12q-fixed")
}

// TestNVSchedulerRefusals: a vGPU in use blocks the change (it must be
// re-created); without NVML the carve says so; nothing changes either way.
func TestNVSchedulerRefusals(t *testing.T) {
	ctx := context.Background()
	s := newSchedRig(t, "t4", simnvml.ModelT4)
	s.mustDo(t, "t4-4q")
	g := s.gpuNow(t)
	var busy string
	for _, mt := range g.MdevTypes {
		if len(mt.Instances) > 0 {
			busy = mt.Instances[0]
		}
	}
	hold(t, s.k, mdevGroupDevice(t, s.rig, busy))
	before := s.state(t)
	_, err := s.do(ctx, "t4-4q-equal", carve.Options{})
	checkBlockedBy(t, "scheduler change", err, busy)
	checkUnchanged(t, "a refused change", before, s.state(t))

	n := newRig(t, "t4") // a carver without NVML
	_, err = n.do(ctx, "t4-4q-equal", carve.Options{})
	if !errors.Is(err, nvstate.ErrUnavailable) {
		t.Fatalf("carve without NVML: %v", err)
	}
	if len(n.rec.Writes()) != 0 {
		t.Fatalf("a refused carve wrote %v", n.rec.Writes())
	}
}

// TestNVSchedulerUndoAtEveryStep fails each sysfs write and the NVML
// change in turn: the host (sysfs and NVML) is as it was.
func TestNVSchedulerUndoAtEveryStep(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ model, nvModel, setup, prof string }{
		{"t4", simnvml.ModelT4, "t4-4q", "t4-4q-equal"},
		{"t4", simnvml.ModelT4, "", "t4-4q-equal"},
		{"l40s", simnvml.ModelL40S, "l40s-12q", "l40s-12q-fixed"},
	} {
		prepare := func(t *testing.T) *schedRig {
			s := newSchedRig(t, c.model, c.nvModel)
			if c.setup != "" {
				s.mustDo(t, c.setup)
			}
			s.mgr.calls = 0
			return s
		}
		t.Run(c.setup+" to "+c.prof, func(t *testing.T) {
			probe := prepare(t)
			writes := changeWrites(t, probe.rig, c.prof, carve.Options{})
			if probe.mgr.calls != 1 {
				t.Fatalf("%d NVML changes, want 1", probe.mgr.calls)
			}
			fail := func(t *testing.T, inject func(*schedRig), what string) {
				t.Helper()
				s := prepare(t)
				before := s.state(t)
				inject(s)
				_, err := s.do(ctx, c.prof, carve.Options{})
				checkUndone(t, what, err, before, s.state(t))
			}
			fail(t, func(s *schedRig) { s.mgr.failAt = 1 }, "the NVML change")
			for i, w := range writes {
				fail(t, func(s *schedRig) { failWrite(s.k, writes, i) }, fmt.Sprintf("write %d of %d (%s <- %q)", i+1, len(writes), w.Path, w.Data))
			}
		})
	}
}

// mdevGroupDevice is /dev/vfio/<group> of mdev uuid.
func mdevGroupDevice(t *testing.T, r *rig, uuid string) string {
	t.Helper()
	vs, err := carve.VGPUs(context.Background(), r.k, []inventory.GPU{r.gpuNow(t)}, r.cat)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.ID == uuid {
			return pci.GroupDevicePath(v.IOMMUGroup)
		}
	}
	t.Fatalf("no vGPU %s", uuid)
	return ""
}

// carriesShape: the GPU has prof's vGPUs. Which of two profiles of one
// type (scheduler apart) it carries, sysfs cannot tell: NVML can.
func carriesShape(t *testing.T, r *rig, prof string) {
	t.Helper()
	g := r.gpuNow(t)
	if !carve.Carries(g, r.cat, prof) {
		t.Fatalf("GPU does not carry %s's vGPUs", prof)
	}
}

// TestProfileOfSched: sysfs shows t4-4q and t4-4q-equal alike; NVML's
// scheduler names the one the GPU carries, and without NVML the one that
// asks for no scheduler is named.
func TestProfileOfSched(t *testing.T) {
	s := newSchedRig(t, "t4", simnvml.ModelT4)
	s.mustDo(t, "t4-4q")
	g := s.gpuNow(t)
	if got := carve.ProfileOfSched(g, s.cat, s.mgr); got != "t4-4q" {
		t.Fatalf("best effort: %q, want t4-4q", got)
	}
	s.mustDo(t, "t4-4q-equal")
	g = s.gpuNow(t)
	if got := carve.ProfileOfSched(g, s.cat, s.mgr); got != "t4-4q-equal" {
		t.Fatalf("equal share: %q, want t4-4q-equal", got)
	}
	if got := carve.ProfileOfSched(g, s.cat, nil); got != "t4-4q" {
		t.Fatalf("equal share without NVML: %q, want t4-4q", got)
	}
	if got := carve.ProfileOfSched(g, s.cat, nvmlstate.New("/no/such/libnvidia-ml.so.1")); got != "t4-4q" {
		t.Fatalf("equal share, NVML failing: %q, want t4-4q", got)
	}
}
