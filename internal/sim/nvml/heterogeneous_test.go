package simnvml_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

const l40s = "0000:86:00.0"

// hetero reads the mode, failing the test on an error.
func hetero(t *testing.T, d nvmlstate.Device) bool {
	t.Helper()
	m, r := d.GetVgpuHeterogeneousMode()
	if r != nvml.SUCCESS {
		t.Fatalf("GetVgpuHeterogeneousMode: %v", r)
	}
	return m.Mode == uint32(nvml.FEATURE_ENABLED)
}

func setHetero(d nvmlstate.Device, on bool) nvml.Return {
	m := nvml.VgpuHeterogeneousMode{Mode: uint32(nvml.FEATURE_DISABLED)}
	if on {
		m.Mode = uint32(nvml.FEATURE_ENABLED)
	}
	return d.SetVgpuHeterogeneousMode(m)
}

// Mixed-size mode as nvml.h documents it: off at load, NOT_SUPPORTED with
// MIG on, IN_USE while a vGPU exists, and the fixed-share scheduler is
// refused in it (and it with that scheduler).
func TestHeterogeneousModeRules(t *testing.T) {
	s, err := simnvml.New(simnvml.GPU{Model: simnvml.ModelL40S, BusID: l40s}, simnvml.GPU{Model: simnvml.ModelA100PCIe40GB, BusID: a100})
	if err != nil {
		t.Fatal(err)
	}
	s.Init()
	defer s.Shutdown()
	d, _ := s.DeviceGetHandleByPciBusId(l40s)
	if hetero(t, d) {
		t.Fatal("mixed-size mode on at driver load")
	}
	if r := setHetero(d, true); r != nvml.SUCCESS || !hetero(t, d) {
		t.Fatalf("set on: %v, mode %v", r, hetero(t, d))
	}
	if r := d.SetVgpuHeterogeneousMode(nvml.VgpuHeterogeneousMode{Mode: 7}); r != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("mode 7: %v, want INVALID_ARGUMENT", r)
	}
	fixed := nvml.VgpuSchedulerSetState{SchedulerPolicy: nvml.VGPU_SCHEDULER_POLICY_FIXED_SHARE}
	if r := d.SetVgpuSchedulerState(&fixed); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("fixed share in mixed-size mode: %v, want NOT_SUPPORTED", r)
	}
	if r := setHetero(d, false); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	if r := d.SetVgpuSchedulerState(&fixed); r != nvml.SUCCESS {
		t.Fatalf("fixed share: %v", r)
	}
	if r := setHetero(d, true); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("mixed-size mode with fixed share: %v, want NOT_SUPPORTED", r)
	}

	vgpus := 0
	s.SetVGPUs(func(string) int { return vgpus })
	vgpus = 1
	if r := setHetero(d, false); r != nvml.ERROR_IN_USE {
		t.Errorf("set with a vGPU: %v, want IN_USE", r)
	}

	a, _ := s.DeviceGetHandleByPciBusId(a100)
	if act, r := a.SetMigMode(nvml.DEVICE_MIG_ENABLE); r != nvml.SUCCESS || act != nvml.SUCCESS {
		t.Fatal(r, act)
	}
	if _, r := a.GetVgpuHeterogeneousMode(); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("get with MIG on: %v, want NOT_SUPPORTED", r)
	}
	vgpus = 0
	if r := setHetero(a, true); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("set with MIG on: %v, want NOT_SUPPORTED", r)
	}
}

// Mixed-size mode does not outlive sriov-manage's rebind nor a reset.
func TestHeterogeneousModeReset(t *testing.T) {
	_, s, d := joinedL40S(t)
	for _, lose := range []struct {
		name string
		do   func() error
	}{
		{"driver rebind", func() error { return s.DriverRebind(l40s) }},
		{"GPU reset", func() error {
			if r := s.ResetGPU(l40s); r != nvml.SUCCESS {
				return r
			}
			return nil
		}},
	} {
		if r := setHetero(d, true); r != nvml.SUCCESS {
			t.Fatal(r)
		}
		if err := lose.do(); err != nil {
			t.Fatal(err)
		}
		if hetero(t, d) {
			t.Errorf("mixed-size mode survived a %s", lose.name)
		}
	}
}

// On the joined kernel: with the mode on, VFs take types of another size
// than the one in use; sriov-manage -e turns it off (its rebind), and a
// type set makes NVML refuse the mode (IN_USE).
func TestHeterogeneousModeOnKernel(t *testing.T) {
	k, s, d := joinedL40S(t)
	run := func(flag string) {
		t.Helper()
		s.Shutdown() // the script needs the unbind lock
		defer s.Init()
		if out, err := k.RunTool(context.Background(), sysfs.ToolSriovManage, flag, l40s); err != nil {
			t.Fatalf("sriov-manage %s: %v: %s", flag, err, out)
		}
	}
	vfType := func(i int) string {
		a := pci.MustParseAddress(l40s)
		a.Device, a.Function = uint8((4+i)/8), uint8((4+i)%8)
		return filepath.Join(pci.DevicePath(a), "nvidia", "current_vgpu_type")
	}
	if r := setHetero(d, true); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	run("-e")
	if hetero(t, d) {
		t.Fatal("mixed-size mode survived sriov-manage -e")
	}
	// 1155 is L40S-24Q, 1153 L40S-12Q (internal/sim/kernel l40sTypes).
	if err := k.WriteFile(vfType(0), []byte("1155")); err != nil {
		t.Fatal(err)
	}
	if err := k.WriteFile(vfType(1), []byte("1153")); err == nil {
		t.Fatal("a second size was taken in equal-size mode")
	}
	if r := setHetero(d, true); r != nvml.ERROR_IN_USE {
		t.Fatalf("set with a vGPU: %v, want IN_USE", r)
	}
	if err := k.WriteFile(vfType(0), []byte("0")); err != nil {
		t.Fatal(err)
	}
	if r := setHetero(d, true); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	for i, id := range []string{"1155", "1153"} {
		if err := k.WriteFile(vfType(i), []byte(id)); err != nil {
			t.Fatalf("VF %d <- %s in mixed-size mode: %v", i, id, err)
		}
	}
	b, err := k.ReadFile(filepath.Join(filepath.Dir(vfType(2)), "creatable_vgpu_types"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "L40S-24Q") || !strings.Contains(string(b), "L40S-12Q") {
		t.Errorf("VF 2 lists %q with 36 GB of 48 used, want 12Q and no 24Q", b)
	}
}

// joinedL40S is an L40S on a vGPU 17+ host with its NVML joined.
func joinedL40S(t *testing.T) (*simkernel.Kernel, *simnvml.Server, nvmlstate.Device) {
	t.Helper()
	return joinedOn(t, simkernel.ModelL40S, simnvml.ModelL40S, l40s)
}
