package carve_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
	"github.com/vgpu-project/vgpu/pkg/xe"
)

// xeRig is a rig on one Arc Pro B50 whose kernel has xeMaxVFs and xeAdmin.
func xeRig(t *testing.T, maxVFs *int, admin string) *rig {
	t.Helper()
	a := gpuAddr["arc-pro-b50"]
	return newRigOn(t, simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{{Model: "arc-pro-b50", Address: a}},
		XeMaxVFs: maxVFs, XeAdmin: admin}, a)
}

// b50Migratable names, in scenarios, an Arc Pro B50 on Linux 7.0 (with
// vram_quota) with xe-vfio-pci loaded.
const b50Migratable = "arc-pro-b50 7.0 xe-vfio-pci"

// xeRig70 is a rig on one Arc Pro B50 on Linux 7.0, with xe-vfio-pci
// loaded or not.
func xeRig70(t *testing.T, vfio bool) *rig {
	t.Helper()
	a := gpuAddr["arc-pro-b50"]
	return newRigOn(t, simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{{Model: "arc-pro-b50", Address: a}},
		XeAdmin: simkernel.XeAdmin70, XeVFIO: vfio}, a)
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

// TestXePinnedVRAM: on Linux 7.0 with xe-vfio-pci, a pinned profile
// writes each VF's vram_quota while no VF exists, before sriov_numvfs;
// the VFs land on xe-vfio-pci and list as vGPUs there; in use, they are
// not destroyed without force; an uncarve leaves the VRAM released; after
// a reboot the same carve pins the same VRAM.
func TestXePinnedVRAM(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, b50Migratable)
	r.mustDo(t, "b50-4g-pinned")
	p, _ := r.cat.Get("b50-4g-pinned")
	want := p.XeVRAMQuota()
	if want != 3456<<20 {
		t.Fatalf("pinned share = %d", want)
	}
	quotas := func() []uint64 {
		t.Helper()
		var out []uint64
		for n := 1; n <= 16; n++ {
			q, err := xe.ReadQuota(r.k, r.gpu, n)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, q)
		}
		return out
	}
	got := quotas()
	for n, q := range got {
		if (n < 4) != (q == want) || n >= 4 && q != 0 {
			t.Fatalf("quotas after carve = %v, want %d for vf1..vf4", got, want)
		}
	}
	// Order: quotas before the VFs come.
	numvfs, lastQuota := -1, -1
	for i, w := range r.rec.Writes() {
		switch {
		case strings.HasSuffix(w.Path, "/sriov_numvfs") && w.Data != "0":
			numvfs = i
		case strings.HasSuffix(w.Path, "/vram_quota"):
			lastQuota = i
		}
	}
	if lastQuota < 0 || numvfs < lastQuota {
		t.Fatalf("vram_quota written at %d, sriov_numvfs at %d", lastQuota, numvfs)
	}
	g := r.gpuNow(t)
	vs, err := carve.VGPUs(ctx, r.k, []inventory.GPU{g}, r.cat, carve.VFIOUsage{FS: r.k})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 4 {
		t.Fatalf("vGPUs: %+v", vs)
	}
	for _, v := range vs {
		if v.Kind != vgpu.KindVF || v.Driver != xe.VFIODriver || v.Profile != "b50-4g-pinned" || v.InUse {
			t.Fatalf("vGPU %+v", v)
		}
	}
	// A VM holds VF 2: listed in use, and neither a re-split nor an
	// uncarve takes it.
	h := hold(t, r.k, pci.GroupDevicePath(g.SRIOV.VFs[2].IOMMUGroup))
	vs, err = carve.VGPUs(ctx, r.k, []inventory.GPU{g}, r.cat, carve.VFIOUsage{FS: r.k})
	if err != nil || !vs[2].InUse {
		t.Fatalf("in use not seen on xe-vfio-pci: %+v, %v", vs, err)
	}
	before := snapshot(t, r.k)
	for _, change := range []string{"", "b50-2g"} {
		if _, err := r.do(ctx, change, carve.Options{}); !errors.Is(err, carve.ErrInUse) {
			t.Fatalf("change to %q with VF 2 in use: %v", change, err)
		}
	}
	checkUnchanged(t, "a refused change", before, snapshot(t, r.k))
	_ = h.Close()
	// Uncarve: the VFs go, and xe releases their VRAM.
	r.mustDo(t, "")
	for n, q := range quotas() {
		if q != 0 {
			t.Fatalf("vf%d keeps %d bytes after uncarve", n+1, q)
		}
	}
	// A reboot: nothing pinned; the carve at start pins the same again.
	r2 := newRig(t, b50Migratable)
	r2.mustDo(t, "b50-4g-pinned")
	if g2 := r2.gpuNow(t); !slices.Equal(g2.Xe.Quotas, []uint64{want, want, want, want}) {
		t.Fatalf("after reboot: %v", g2.Xe.Quotas)
	}
}

// TestXeVFIOLoadedLater: VFs carved on vfio-pci move to xe-vfio-pci once
// it is loaded, by the next carve, which waits for no VM: a VF in use
// blocks the move.
func TestXeVFIOLoadedLater(t *testing.T) {
	ctx := context.Background()
	r := xeRig70(t, false)
	r.mustDo(t, "b50-4g-pinned")
	g := r.gpuNow(t)
	if d := g.SRIOV.VFs[0].Driver; d != pci.VFIOPCI {
		t.Fatalf("VF on %q without xe-vfio-pci", d)
	}
	if out, err := r.k.RunTool(ctx, sysfs.ToolModprobe, xe.VFIODriver); err != nil {
		t.Fatalf("modprobe: %v: %s", err, out)
	}
	h := hold(t, r.k, pci.GroupDevicePath(g.SRIOV.VFs[1].IOMMUGroup))
	res, err := r.do(ctx, "b50-4g-pinned", carve.Options{})
	if !errors.Is(err, carve.ErrInUse) || len(res.Plan.Blocked) != 1 || res.Plan.Blocked[0].VGPU != g.SRIOV.VFs[1].Address.String() {
		t.Fatalf("move with VF 1 in use: %v, blocked %+v", err, res.Plan.Blocked)
	}
	_ = h.Close()
	res = r.mustDo(t, "b50-4g-pinned")
	for _, o := range res.Plan.Ops {
		if o.Kind != carve.OpDriver || o.To != xe.VFIODriver {
			t.Fatalf("the move did more than rebind: %s", res.Plan)
		}
	}
	for _, vf := range r.gpuNow(t).SRIOV.VFs {
		if vf.Driver != xe.VFIODriver {
			t.Fatalf("VF %s on %s", vf.Address, vf.Driver)
		}
	}
}

// TestXeQuotaRefusals: without vram_quota (before 7.0) a pinned profile is
// refused with one line and nothing written; a profile without a pin
// carves there.
func TestXeQuotaRefusals(t *testing.T) {
	ctx := context.Background()
	r := xeRig(t, nil, "")
	_, err := r.do(ctx, "b50-4g-pinned", carve.Options{})
	if err == nil || !strings.Contains(err.Error(), "this kernel has no /sys/bus/pci/devices/0000:05:00.0/sriov_admin/vf1/profile/vram_quota (Linux 7.0 or later has it)") {
		t.Fatalf("pinned profile before 7.0: %v", err)
	}
	if len(r.rec.Writes()) != 0 {
		t.Fatalf("a refused plan wrote %v", r.rec.Writes())
	}
	r.mustDo(t, "b50-4g")
	// On 7.0, a profile without a pin leaves pinned VRAM as it is.
	r = xeRig70(t, true)
	r.mustDo(t, "b50-4g-pinned")
	res, err := r.do(ctx, "b50-4g", carve.Options{})
	if err != nil || !res.Plan.Empty() {
		t.Fatalf("b50-4g on pinned VFs: %v\n%s", err, res.Plan)
	}
	if got := carve.ProfileOf(r.gpuNow(t), r.cat); got != "b50-4g-pinned" {
		t.Fatalf("ProfileOf = %q", got)
	}
}
