package carve_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-project/vgpu/internal/simkernel"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/xe"
)

// xeRig is a rig on one Arc Pro B50 whose kernel has xeMaxVFs and xeAdmin.
func xeRig(t *testing.T, maxVFs *int, admin string) *rig {
	t.Helper()
	a := gpuAddr["arc-pro-b50"]
	return newRigOn(t, simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{{Model: "arc-pro-b50", Address: a}},
		XeMaxVFs: maxVFs, XeAdmin: admin}, a)
}

// TestXeScheduling: a profile's xe scheduling lands in sriov_admin/ for
// each VF (the priority in bulk), and the inventory reads it back.
func TestXeScheduling(t *testing.T) {
	r := xeRig(t, nil, "")
	if _, err := r.do(context.Background(), "b50-4g-sliced", carve.Options{}); err != nil {
		t.Fatal(err)
	}
	g := r.gpuNow(t)
	if g.Xe == nil || g.Xe.Priority != "normal" || len(g.Xe.VFs) != 4 {
		t.Fatalf("inventory's xe view = %+v", g.Xe)
	}
	for i, s := range g.Xe.VFs {
		if s.ExecQuantumMS != 20 || s.PreemptTimeoutUS != 40000 {
			t.Errorf("VF %d: %+v", i, s)
		}
	}
	var bulk int
	for _, w := range r.rec.Writes() {
		if strings.HasSuffix(w.Path, "/.bulk_profile/sched_priority") {
			bulk++
		}
	}
	if bulk != 1 {
		t.Errorf("%d bulk priority writes, want 1", bulk)
	}
	if got := carve.ProfileOf(g, r.cat); got != "b50-4g-sliced" {
		t.Errorf("the GPU reads as %q", got)
	}
	// An uncarve leaves the GPU as xe loaded it: the VFs' shared
	// priority, which outlives them, back to low.
	if _, err := r.do(context.Background(), "", carve.Options{}); err != nil {
		t.Fatal(err)
	}
	if g := r.gpuNow(t); g.Xe == nil || g.Xe.Priority != "low" {
		t.Fatalf("after uncarve xe's view = %+v", g.Xe)
	}
}

// TestXeRefusals: each with one line, nothing changed.
func TestXeRefusals(t *testing.T) {
	ctx := context.Background()
	// Before Linux 6.19: no sriov_admin/. A profile without xe scheduling
	// still carves.
	r := xeRig(t, nil, simkernel.XeAdminNone)
	before := snapshot(t, r.k)
	_, err := r.do(ctx, "b50-4g-sliced", carve.Options{})
	if err == nil || !strings.Contains(err.Error(), "this kernel has no /sys/bus/pci/devices/0000:05:00.0/sriov_admin (Linux 6.19 or later has it)") {
		t.Fatalf("xe scheduling without sriov_admin: %v", err)
	}
	if len(r.rec.Writes()) != 0 || len(snapshot(t, r.k)) != len(before) {
		t.Fatalf("a refused plan wrote %v", r.rec.Writes())
	}
	if _, err := r.do(ctx, "b50-4g", carve.Options{}); err != nil {
		t.Fatalf("plain 4:1 without sriov_admin: %v", err)
	}

	// xe.max_vfs=0: no PF mode; the kernel's ENODEV becomes the fix.
	zero := 0
	r = xeRig(t, &zero, "")
	_, err = r.do(ctx, "b50-4g", carve.Options{})
	if !errors.Is(err, syscall.ENODEV) || !strings.Contains(err.Error(), "xe drives 0000:05:00.0 without SR-IOV PF mode: its max_vfs parameter is 0") ||
		!strings.Contains(err.Error(), "xe.max_vfs=4") || !strings.Contains(err.Error(), "undone, the GPU is as it was") {
		t.Fatalf("carve with xe.max_vfs=0: %v", err)
	}

	// Another driver than xe with a profile that sets xe scheduling.
	r = xeRig(t, nil, "")
	write := func(p, v string) {
		t.Helper()
		if err := r.k.WriteFile(p, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	write(pci.DevicePath(r.gpu)+"/driver/unbind", r.gpu.String())
	write(pci.DevicePath(r.gpu)+"/driver_override", "pci-stub")
	write("/sys/bus/pci/drivers/pci-stub/bind", r.gpu.String())
	_, err = r.do(ctx, "b50-4g-sliced", carve.Options{})
	if err == nil || !strings.Contains(err.Error(), "xe does not drive this GPU") {
		t.Fatalf("xe scheduling on pci-stub: %v", err)
	}
	if ok, _ := xe.HasAdmin(r.k, r.gpu); ok {
		t.Fatal("sriov_admin outlived xe")
	}
}
