//go:build cgo

package carve_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

var migAddr = pci.MustParseAddress("0000:ca:00.0")

// migRig is a rig on an A100 on a vGPU 17+ host whose NVML (simnvml) is
// joined to the fake kernel, carving through pkg/nvstate's NVML code.
type migRig struct{ *nvRig }

func newMIGRig(t *testing.T) *migRig {
	t.Helper()
	return newMIGRigOn(t, simkernel.ModelA100VF, simnvml.ModelA100PCIe40GB)
}

// newMIGRigOn is a migRig on another board: the fake kernel's model and
// simnvml's.
func newMIGRigOn(t *testing.T, model, nvModel string) *migRig {
	t.Helper()
	m := &migRig{newNVRig(t, newRigOn(t, oneGPU(model, migAddr), migAddr), nvModel)}
	m.k.SetMIG(m.nv)
	m.useCarver(t, carve.WithMIG(m.mgr))
	return m
}

func (m *migRig) useCarver(t *testing.T, opts ...carve.Option) {
	m.c = carve.New(m.rec, m.cat, m.store, append([]carve.Option{carve.WithLocker(carve.NewLocker(t.TempDir())),
		carve.WithToolRetry(3, time.Millisecond)}, opts...)...)
}

// state is the whole host: sysfs and what NVML shows.
func (m *migRig) state(t *testing.T) map[string]string {
	t.Helper()
	s := snapshot(t, m.k)
	m.nv.Init()
	dev, _ := m.nv.DeviceGetHandleByPciBusId(migAddr.String())
	cur, pend, _ := dev.GetMigMode()
	m.nv.Shutdown()
	s["nvml:mig-mode"] = fmt.Sprint(cur, pend)
	s["nvml:instances"] = fmt.Sprintf("%+v", m.nv.Instances(migAddr.String()))
	return s
}

func (m *migRig) instances(t *testing.T, profileID int) int {
	t.Helper()
	n := 0
	for _, in := range m.nv.Instances(migAddr.String()) {
		if in.ProfileID != profileID {
			t.Fatalf("instance %+v, want only profile %d", in, profileID)
		}
		n++
	}
	return n
}

// faultyMIG fails the nth change (SetMode, Create, Destroy, SetScheduler,
// SetMixedSize) it is asked for, as NVML would on a driver error, without
// making it.
type faultyMIG struct {
	nvstate.Manager
	failAt, calls int
}

var errNVML = errors.New("NVML: Unknown Error")

func (f *faultyMIG) change() error {
	f.calls++
	if f.calls == f.failAt {
		return errNVML
	}
	return nil
}

func (f *faultyMIG) SetMode(gpu pci.Address, on bool) error {
	if err := f.change(); err != nil {
		return err
	}
	return f.Manager.SetMode(gpu, on)
}

func (f *faultyMIG) Create(gpu pci.Address, id int, start *int) (nvstate.Instance, error) {
	if err := f.change(); err != nil {
		return nvstate.Instance{}, err
	}
	return f.Manager.Create(gpu, id, start)
}

func (f *faultyMIG) SetScheduler(gpu pci.Address, sc nvstate.Sched) error {
	if err := f.change(); err != nil {
		return err
	}
	return f.Manager.SetScheduler(gpu, sc)
}

func (f *faultyMIG) SetMixedSize(gpu pci.Address, on bool) error {
	if err := f.change(); err != nil {
		return err
	}
	return f.Manager.SetMixedSize(gpu, on)
}

func (f *faultyMIG) Destroy(gpu pci.Address, id int) error {
	if err := f.change(); err != nil {
		return err
	}
	return f.Manager.Destroy(gpu, id)
}

// TestMIGCarve: a fresh A100 becomes 7 MIG-backed vGPUs in the driver's
// order; the same carve again changes nothing; a re-split swaps the
// instances; an uncarve leaves no instance and no VF, MIG mode on.
func TestMIGCarve(t *testing.T) {
	ctx := context.Background()
	m := newMIGRig(t)
	res := m.mustDo(t, "a100-1-5c")
	var kinds []string
	for _, o := range res.Plan.Ops {
		if k := string(o.Kind); len(kinds) == 0 || kinds[len(kinds)-1] != k {
			kinds = append(kinds, k)
		}
	}
	if want := []string{"mig-mode", "sriov-manage", "gpu-instance-create", "driver", "nvidia-type"}; !reflect.DeepEqual(kinds, want) {
		t.Fatalf("op order %v, want %v:\n%s", kinds, want, res.Plan)
	}
	checkCarried(t, m.rig, "a100-1-5c")
	if n := m.instances(t, 19); n != 7 {
		t.Fatalf("%d 1g.5gb instances, want 7", n)
	}
	if n := m.nv.Sessions(); n != 0 {
		t.Fatalf("%d NVML sessions left open", n)
	}
	// The other VFs offer nothing: every instance carries a vGPU, and with
	// MIG on no time-sliced type is offered.
	for _, vf := range m.gpuNow(t).SRIOV.VFs[7:] {
		if len(vf.NVIDIA.Creatable) != 0 {
			t.Fatalf("%s offers %+v", vf.Address, vf.NVIDIA.Creatable)
		}
	}
	m.checkSettled(t, "second carve", "a100-1-5c")

	for _, step := range []struct {
		prof string
		id   int
		n    int
	}{{"a100-2-10c", 14, 3}, {"a100-7-40c", 0, 1}, {"a100-3-20c", 9, 2}} {
		from := len(m.rec.Writes())
		m.mustDo(t, step.prof)
		if n := toolRuns(m.rec.Writes()[from:]); n != 0 {
			t.Fatalf("re-split to %s ran sriov-manage %d times", step.prof, n)
		}
		checkCarried(t, m.rig, step.prof)
		if n := m.instances(t, step.id); n != step.n {
			t.Fatalf("%s: %d instances, want %d", step.prof, n, step.n)
		}
	}

	if res, err := m.do(ctx, "", carve.Options{}); err != nil {
		t.Fatalf("uncarve: %v\nplan:\n%s", err, res.Plan)
	}
	checkCarried(t, m.rig, "")
	if n := m.instances(t, -1); n != 0 {
		t.Fatalf("uncarve left %d instances", n)
	}
	if s := m.state(t); s["nvml:mig-mode"] != "1 1" {
		t.Fatalf("MIG mode %s after uncarve, want it left on", s["nvml:mig-mode"])
	}
}

// TestMIGBootReapply: none of a carve survives a reboot (VFs, instances,
// types); MIG mode may (Ampere) or may not (docs/vendors/nvidia.md,
// "MIG-backed vGPU").
// Carving again rebuilds the same vGPUs either way.
func TestMIGBootReapply(t *testing.T) {
	for _, keepsMode := range []bool{true, false} {
		t.Run(fmt.Sprintf("mode kept %v", keepsMode), func(t *testing.T) {
			m := newMIGRig(t) // the rebooted host: no VFs, no instances
			if keepsMode {
				m.nv.Init()
				dev, _ := m.nv.DeviceGetHandleByPciBusId(migAddr.String())
				if _, r := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); r != nvml.SUCCESS {
					t.Fatal(r)
				}
				m.nv.Shutdown()
			}
			res := m.mustDo(t, "a100-2-10c")
			modeOps := 0
			for _, o := range res.Plan.Ops {
				if o.Kind == carve.OpMIGMode {
					modeOps++
				}
			}
			if want := map[bool]int{true: 0, false: 1}[keepsMode]; modeOps != want {
				t.Fatalf("%d MIG mode changes, want %d", modeOps, want)
			}
			checkCarried(t, m.rig, "a100-2-10c")
			if n := m.instances(t, 14); n != 3 {
				t.Fatalf("%d instances, want 3", n)
			}
		})
	}
}

// TestMIGFromTimeSliced: VFs enabled with MIG off (a time-sliced carve
// before) must go: MIG mode cannot change while VFs exist.
func TestMIGFromTimeSliced(t *testing.T) {
	m := newMIGRig(t)
	timeSliced(t, m)
	m.mustDo(t, "a100-1-5c")
	checkCarried(t, m.rig, "a100-1-5c")
}

// TestTimeSlicedFromMIG: a time-sliced profile on a GPU in MIG mode, which
// offers no time-sliced type there, turns MIG off first: the MIG-backed
// vGPUs, their instances and the VFs go, then MIG mode; so does one on a
// GPU an uncarve left in MIG mode (which an Ampere GPU keeps across
// reboots).
func TestTimeSlicedFromMIG(t *testing.T) {
	ctx := context.Background()
	for _, setup := range [][]string{{"a100-1-5c"}, {"a100-1-5c", ""}} {
		m := newMIGRig(t)
		for _, p := range setup {
			if _, err := m.do(ctx, p, carve.Options{}); err != nil {
				t.Fatalf("setup %q: %v", p, err)
			}
		}
		if md, _ := m.mgr.Mode(migAddr); !md.Current {
			t.Fatalf("setup %v left MIG off: the test proves nothing", setup)
		}
		res, err := m.do(ctx, "a100-vf-20c", carve.Options{})
		if err != nil {
			t.Fatalf("after %v: %v\nplan:\n%s", setup, err, res.Plan)
		}
		if md, _ := m.mgr.Mode(migAddr); md.Current || md.Pending {
			t.Fatalf("after %v: MIG mode %+v, want off", setup, md)
		}
		if n := len(m.nv.Instances(migAddr.String())); n != 0 {
			t.Fatalf("after %v: %d GPU instances", setup, n)
		}
		checkCarried(t, m.rig, "a100-vf-20c")
	}
}

// timeSliced leaves the VFs as a time-sliced carve does: enabled with MIG
// off, one with a type.
func timeSliced(t *testing.T, m *migRig) {
	t.Helper()
	if out, err := m.k.RunTool(context.Background(), "sriov-manage", "-e", migAddr.String()); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	vf := m.gpuNow(t).SRIOV.VFs[0].Address
	if err := m.k.WriteFile(pci.DevicePath(vf)+"/nvidia/current_vgpu_type", []byte("471")); err != nil {
		t.Fatal(err)
	}
}

// TestMIGRefusals: each refusal is one line naming the GPU, and leaves the
// host as it was.
func TestMIGRefusals(t *testing.T) {
	checkRefusals(t, newMIGRig, "a100-1-5c", migAddr, []refusal[*migRig]{
		{"no NVML library", func(t *testing.T, m *migRig) {
			m.useCarver(t, carve.WithMIG(nvmlstate.New(filepath.Join(t.TempDir(), "libnvidia-ml.so.1"))))
		}, nvstate.ErrUnavailable, "GPU 0000:ca:00.0: NVML unavailable: NVIDIA's NVML library"},
		{"carver without NVML", func(t *testing.T, m *migRig) { m.useCarver(t) }, nvstate.ErrUnavailable, "started without NVML"},
		{"GPU busy: MIG mode pends", func(t *testing.T, m *migRig) {
			if err := m.nv.SetBusy(migAddr.String(), true); err != nil {
				t.Fatal(err)
			}
		}, nvstate.ErrPending, "MIG mode change pending"},
		{"NVML client holds the unbind lock", func(t *testing.T, m *migRig) {
			m.nv.Init() // an nvidia-smi that stays
			t.Cleanup(func() { m.nv.Shutdown() })
		}, carve.ErrVendorTool, "an NVML client"},
	})
}

// TestMIGUndoAtEveryStep fails each sysfs write and each NVML change of
// each MIG change in turn, and checks the host (sysfs and NVML) is as it
// was.
func TestMIGUndoAtEveryStep(t *testing.T) {
	ctx := context.Background()
	for _, s := range []struct {
		name  string
		setup []string // carves, or "time-sliced": VFs on with MIG off and a type set
		prof  string
	}{
		{"fresh to 1-5c", nil, "a100-1-5c"},
		{"1-5c to 2-10c", []string{"a100-1-5c"}, "a100-2-10c"},
		{"time-sliced to 3-20c", []string{"time-sliced"}, "a100-3-20c"},
		{"uncarve", []string{"a100-3-20c"}, ""},
		{"1-5c to time-sliced", []string{"a100-1-5c"}, "a100-vf-20c"},
	} {
		prepare := func(t *testing.T) *migRig {
			m := newMIGRig(t)
			for _, p := range s.setup {
				if p == "time-sliced" {
					timeSliced(t, m)
					continue
				}
				if _, err := m.do(ctx, p, carve.Options{}); err != nil {
					t.Fatalf("setup %s: %v", p, err)
				}
			}
			m.mgr.calls = 0
			return m
		}
		t.Run(s.name, func(t *testing.T) {
			writes, changes := prepare(t).changeSteps(t, s.prof)
			for i := 1; i <= changes; i++ {
				m := prepare(t)
				before := m.state(t)
				m.mgr.failAt = i
				_, err := m.do(ctx, s.prof, carve.Options{})
				if !errors.Is(err, errNVML) {
					t.Fatalf("NVML change %d: err = %v", i, err)
				}
				checkUndone(t, fmt.Sprintf("NVML change %d of %d", i, changes), err, before, m.state(t))
			}
			for i, w := range writes {
				m := prepare(t)
				before := m.state(t)
				failWrite(m.k, writes, i)
				_, err := m.do(ctx, s.prof, carve.Options{})
				if w.Tool != "" && err == nil {
					checkCarried(t, m.rig, s.prof) // the script went on past it
					continue
				}
				checkUndone(t, fmt.Sprintf("write %d of %d (%s <- %q)", i+1, len(writes), w.Path, w.Data), err, before, m.state(t))
			}
		})
	}
}

// TestMIGRepairsOneVF: a VF whose type was cleared behind vgpu's back gets
// it again on its free instance, and nothing else changes.
func TestMIGRepairsOneVF(t *testing.T) {
	m := newMIGRig(t)
	m.mustDo(t, "a100-1-5c")
	vf := m.gpuNow(t).SRIOV.VFs[2].Address
	if err := m.k.WriteFile(pci.DevicePath(vf)+"/nvidia/current_vgpu_type", []byte("0")); err != nil {
		t.Fatal(err)
	}
	res := m.mustDo(t, "a100-1-5c")
	if len(res.Plan.Ops) != 1 || res.Plan.Ops[0].Kind != carve.OpNVType || *res.Plan.Ops[0].VF != 2 {
		t.Fatalf("plan:\n%s", res.Plan)
	}
	checkCarried(t, m.rig, "a100-1-5c")
	if n := m.instances(t, 19); n != 7 {
		t.Fatalf("%d instances", n)
	}
}
