package simnvml_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

const a100 = "0000:ca:00.0"

// joined is an A100 on a vGPU 17+ host with its NVML.
func joined(t *testing.T) (*simkernel.Kernel, *simnvml.Server, nvmlstate.Device) {
	t.Helper()
	return joinedOn(t, simkernel.ModelA100VF, simnvml.ModelA100PCIe40GB, a100)
}

// joinedOn is a GPU at bus on a vGPU 17+ host, model of the fake kernel
// and nvModel of simnvml, with its NVML joined and one session open.
func joinedOn(t *testing.T, model, nvModel, bus string) (*simkernel.Kernel, *simnvml.Server, nvmlstate.Device) {
	t.Helper()
	k := simkernel.NewFor(t, simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{{Model: model, Address: pci.MustParseAddress(bus)}}})
	s, err := simnvml.New(simnvml.GPU{Model: nvModel, BusID: bus})
	if err != nil {
		t.Fatal(err)
	}
	k.SetMIG(s)
	s.SetVGPUs(k.VGPUs)
	s.Init()
	t.Cleanup(func() { s.Shutdown() })
	d, r := s.DeviceGetHandleByPciBusId(bus)
	if r != nvml.SUCCESS {
		t.Fatal(r)
	}
	return k, s, d
}

// sriovManage runs the script with the test's NVML session closed, as the
// driver's unbind lock needs.
func sriovManage(t *testing.T, k *simkernel.Kernel, s *simnvml.Server, flag string) string {
	t.Helper()
	s.Shutdown()
	defer s.Init()
	out, err := k.RunTool(context.Background(), sysfs.ToolSriovManage, flag, a100)
	if err != nil {
		t.Fatalf("sriov-manage %s: %v: %s", flag, err, out)
	}
	return string(out)
}

// vf is VF i's sysfs path (VFs from function 4).
func vf(i int) string {
	a := pci.MustParseAddress(a100)
	a.Device, a.Function = uint8((4+i)/8), uint8((4+i)%8)
	return pci.DevicePath(a)
}

func creatable(t *testing.T, k *simkernel.Kernel, i int) string {
	t.Helper()
	b, err := k.ReadFile(vf(i) + "/nvidia/creatable_vgpu_types")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(string(b), "ID    : vGPU Name\n")
}

func setType(k *simkernel.Kernel, i int, id string) error {
	return k.WriteFile(vf(i)+"/nvidia/current_vgpu_type", []byte(id))
}

// TestKernelMIGTypes: MIG-backed types appear on the VFs only for GPU
// instances that carry no vGPU yet; with MIG on, time-sliced types are not
// offered; a type not creatable now fails with EIO (docs/vendors/nvidia.md, "MIG-backed vGPU").
// destroyAnswering calls Destroy on each of gis and counts the calls that
// answered want.
func destroyAnswering(gis []nvmlstate.GpuInstance, want nvml.Return) int {
	n := 0
	for _, gi := range gis {
		if gi.Destroy() == want {
			n++
		}
	}
	return n
}

func TestKernelMIGTypes(t *testing.T) {
	k, s, d := joined(t)
	sriovManage(t, k, s, "-e")
	if got := creatable(t, k, 0); !strings.HasPrefix(got, "468   : NVIDIA A100-4C\n") || strings.Contains(got, "474") {
		t.Fatalf("MIG off: creatable = %q", got)
	}
	if err := setType(k, 0, "474"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("MIG-backed type with MIG off: %v", err)
	}
	sriovManage(t, k, s, "-d")
	if _, r := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	sriovManage(t, k, s, "-e")
	if got := creatable(t, k, 0); got != "" {
		t.Fatalf("MIG on, no instance: creatable = %q", got)
	}
	info, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	for range 2 {
		if _, r := d.CreateGpuInstance(&info); r != nvml.SUCCESS {
			t.Fatal(r)
		}
	}
	if got := creatable(t, k, 0); got != "474   : NVIDIA A100-1-5C\n" {
		t.Fatalf("two 1g.5gb instances: creatable = %q", got)
	}
	if err := setType(k, 0, "471"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("time-sliced type with MIG on: %v", err)
	}
	for i := range 2 {
		if err := setType(k, i, "474"); err != nil {
			t.Fatal(err)
		}
	}
	if got := creatable(t, k, 2); got != "" {
		t.Fatalf("every instance busy: creatable = %q", got)
	}
	if err := setType(k, 2, "474"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("no free instance: %v", err)
	}
	// An instance a vGPU runs on cannot be destroyed; freed, it can.
	gis, _ := d.GetGpuInstances(&info)
	if held := destroyAnswering(gis, nvml.ERROR_IN_USE); held != 2 {
		t.Fatalf("%d of 2 held instances refused destroy", held)
	}
	if err := setType(k, 0, "0"); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Instances(a100)); n != 2 {
		t.Fatalf("%d instances", n)
	}
	if destroyed := destroyAnswering(gis, nvml.SUCCESS); destroyed != 1 {
		t.Fatalf("%d instances destroyed after one vGPU went, want 1", destroyed)
	}
}

// TestKernelMIGOrder: sriov-manage's rebind wipes GPU instances made before
// it, and MIG mode asked for with VFs enabled only pends.
func TestKernelMIGOrder(t *testing.T) {
	k, s, d := joined(t)
	if _, r := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	info, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if _, r := d.CreateGpuInstance(&info); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	sriovManage(t, k, s, "-e")
	if n := len(s.Instances(a100)); n != 0 {
		t.Fatalf("%d instances survived sriov-manage -e", n)
	}
	if err := setType(k, 0, "474"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("type without its instance: %v", err)
	}
	if _, r := d.SetMigMode(nvml.DEVICE_MIG_DISABLE); r != nvml.ERROR_IN_USE {
		t.Fatalf("MIG off with VFs: %v", r)
	}
	sriovManage(t, k, s, "-d")
	if _, r := d.SetMigMode(nvml.DEVICE_MIG_DISABLE); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	sriovManage(t, k, s, "-e")
	act, r := d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	if cur, pend, _ := d.GetMigMode(); r != nvml.SUCCESS || act != nvml.ERROR_IN_USE || cur != 0 || pend != 1 {
		t.Fatalf("MIG on with VFs: %v/%v, mode %d pending %d; want it pending", r, act, cur, pend)
	}
}

// TestKernelNVMLSessionHoldsUnbindLock: while an NVML session is open the
// driver refuses sriov-manage its unbind lock.
func TestKernelNVMLSessionHoldsUnbindLock(t *testing.T) {
	k, _, _ := joined(t) // its session stays open
	b, _ := k.RunTool(context.Background(), sysfs.ToolSriovManage, "-e", a100)
	out := string(b)
	if !strings.Contains(out, "Cannot obtain unbindLock") {
		t.Fatalf("sriov-manage said %q", out)
	}
	if b, _ := k.ReadFile(pci.DevicePath(pci.MustParseAddress(a100)) + "/sriov_numvfs"); string(b) != "0\n" {
		t.Fatalf("sriov_numvfs = %q", b)
	}
}
