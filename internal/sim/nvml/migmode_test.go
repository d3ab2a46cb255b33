package simnvml

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

const (
	off = nvml.DEVICE_MIG_DISABLE
	on  = nvml.DEVICE_MIG_ENABLE
)

func wantMode(t *testing.T, d *Device, cur, pending int) {
	t.Helper()
	c, p, r := d.GetMigMode()
	if r != nvml.SUCCESS || c != cur || p != pending {
		t.Fatalf("GetMigMode = %d, %d, %v; want %d, %d", c, p, r, cur, pending)
	}
}

func TestSetMigMode(t *testing.T) {
	for _, tc := range []struct {
		name          string
		setup         func(t *testing.T, s *Server, d *Device)
		mode          int
		ret, act      nvml.Return
		cur, pending  int
		afterResetCur int
		resetRefused  bool
	}{
		{
			name: "enable on an idle GPU is immediate",
			mode: on, ret: nvml.SUCCESS, act: nvml.SUCCESS, cur: on, pending: on, afterResetCur: on,
		},
		{
			name:  "enable on a busy GPU stays pending",
			setup: func(t *testing.T, s *Server, d *Device) { s.SetBusy(bus, true) },
			mode:  on, ret: nvml.SUCCESS, act: nvml.ERROR_IN_USE, cur: off, pending: on, resetRefused: true,
		},
		{
			name:  "enable with VFs enabled stays pending",
			setup: func(t *testing.T, s *Server, d *Device) { s.SetVFsEnabled(bus, true) },
			mode:  on, ret: nvml.SUCCESS, act: nvml.ERROR_IN_USE, cur: off, pending: on, resetRefused: true,
		},
		{
			name: "disable with a GPU instance is refused",
			setup: func(t *testing.T, s *Server, d *Device) {
				d.SetMigMode(on)
				if _, r := d.CreateGpuInstance(info(t, d, p1g5)); r != nvml.SUCCESS {
					t.Fatal(r)
				}
			},
			mode: off, ret: nvml.ERROR_IN_USE, act: nvml.ERROR_IN_USE, cur: on, pending: on, afterResetCur: on,
		},
		{
			name: "disable with VFs enabled is refused",
			setup: func(t *testing.T, s *Server, d *Device) {
				d.SetMigMode(on)
				s.SetVFsEnabled(bus, true)
			},
			mode: off, ret: nvml.ERROR_IN_USE, act: nvml.ERROR_IN_USE, cur: on, pending: on, resetRefused: true,
		},
		{
			name: "disable on a busy GPU without instances stays pending",
			setup: func(t *testing.T, s *Server, d *Device) {
				d.SetMigMode(on)
				s.SetBusy(bus, true)
			},
			mode: off, ret: nvml.SUCCESS, act: nvml.ERROR_IN_USE, cur: on, pending: off, resetRefused: true,
		},
		{
			name:  "disable on an idle GPU is immediate",
			setup: func(t *testing.T, s *Server, d *Device) { d.SetMigMode(on) },
			mode:  off, ret: nvml.SUCCESS, act: nvml.SUCCESS, cur: off, pending: off, afterResetCur: off,
		},
		{
			name: "mode 2 is invalid",
			mode: 2, ret: nvml.ERROR_INVALID_ARGUMENT, act: nvml.ERROR_INVALID_ARGUMENT, cur: off, pending: off, afterResetCur: off,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, d := newGPU(t, ModelA100PCIe40GB)
			if tc.setup != nil {
				tc.setup(t, s, d)
			}
			act, r := d.SetMigMode(tc.mode)
			if r != tc.ret || act != tc.act {
				t.Fatalf("SetMigMode(%d) = activation %v, %v; want %v, %v", tc.mode, act, r, tc.act, tc.ret)
			}
			wantMode(t, d, tc.cur, tc.pending)
			if r := s.ResetGPU(bus); tc.resetRefused {
				if r != nvml.ERROR_IN_USE {
					t.Fatalf("ResetGPU on a GPU in use: %v", r)
				}
				wantMode(t, d, tc.cur, tc.pending)
			} else {
				if r != nvml.SUCCESS {
					t.Fatalf("ResetGPU: %v", r)
				}
				wantMode(t, d, tc.afterResetCur, tc.afterResetCur)
			}
		})
	}
}

// The driver applies a pending mode at the next GPU reset, not when the
// clients go away.
func TestPendingNeedsReset(t *testing.T) {
	s, d := newGPU(t, ModelA100PCIe40GB)
	s.SetBusy(bus, true)
	d.SetMigMode(on)
	s.SetBusy(bus, false)
	wantMode(t, d, off, on)
	if _, r := d.CreateGpuInstance(&nvml.GpuInstanceProfileInfo{Id: p1g5}); r != nvml.ERROR_NOT_SUPPORTED {
		t.Fatalf("CreateGpuInstance while only pending: %v", r)
	}
	if r := s.ResetGPU(bus); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	wantMode(t, d, on, on)
	if _, r := d.CreateGpuInstance(info(t, d, p1g5)); r != nvml.SUCCESS {
		t.Fatalf("CreateGpuInstance after reset: %v", r)
	}
}

// Setting the current mode again cancels a pending change.
func TestPendingCancelled(t *testing.T) {
	s, d := newGPU(t, ModelA100PCIe40GB)
	s.SetBusy(bus, true)
	d.SetMigMode(on)
	if act, r := d.SetMigMode(off); r != nvml.SUCCESS || act != nvml.SUCCESS {
		t.Fatalf("SetMigMode(off) = %v, %v", act, r)
	}
	wantMode(t, d, off, off)
}

// MIG instances do not survive a GPU reset (MIG user guide); the mode does.
func TestResetWipesInstances(t *testing.T) {
	s, d := newMIG(t, ModelA100PCIe40GB)
	gi, _ := d.CreateGpuInstance(info(t, d, p3g20))
	if r := s.ResetGPU(bus); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	wantMode(t, d, on, on)
	if n := len(s.Instances(bus)); n != 0 {
		t.Fatalf("%d instances after reset", n)
	}
	if _, r := gi.GetInfo(); r != nvml.ERROR_INVALID_ARGUMENT {
		t.Fatalf("old handle after reset: %v", r)
	}
}

func TestHooksUnknownGPU(t *testing.T) {
	s, _ := newGPU(t, ModelA100PCIe40GB)
	if err := s.SetBusy("0000:3c:00.0", true); err == nil {
		t.Error("SetBusy on an unknown GPU succeeded")
	}
	if err := s.SetVFsEnabled("nonsense", true); err == nil {
		t.Error("SetVFsEnabled on a bad address succeeded")
	}
	if err := s.DriverRebind("0000:3c:00.0"); err == nil {
		t.Error("DriverRebind on an unknown GPU succeeded")
	}
	if r := s.ResetGPU("0000:3c:00.0"); r != nvml.ERROR_NOT_FOUND {
		t.Errorf("ResetGPU on an unknown GPU: %v", r)
	}
	if err := s.SetInstanceInUse(bus, 7, true); err == nil {
		t.Error("SetInstanceInUse on a missing instance succeeded")
	}
	if s.Instances("0000:3c:00.0") != nil {
		t.Error("Instances of an unknown GPU")
	}
}
