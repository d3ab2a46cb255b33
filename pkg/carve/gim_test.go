package carve_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

func hasOp(pl carve.Plan, kind carve.OpKind) bool {
	for _, o := range pl.Ops {
		if o.Kind == kind {
			return true
		}
	}
	return false
}

// carveVia carves prof on a GIM GPU (old or new) and checks that the plan
// changes the VF count with an op of kind, described as want, that nothing
// was written to sriov_numvfs (GIM answers ENOENT there), and that the GPU
// carries prof.
func carveVia(t *testing.T, r *rig, prof string, kind carve.OpKind, want string) {
	t.Helper()
	res, err := r.do(context.Background(), prof, carve.Options{})
	if err != nil {
		t.Fatalf("%v\nplan:\n%s", err, res.Plan)
	}
	if !hasOp(res.Plan, kind) || !strings.Contains(res.Plan.String(), want) {
		t.Fatalf("plan:\n%s", res.Plan)
	}
	for _, w := range r.rec.Writes() {
		if strings.HasSuffix(w.Path, "/sriov_numvfs") {
			t.Fatalf("carve wrote %q to %s; GIM answers ENOENT there", w.Data, w.Path)
		}
	}
	checkCarried(t, r, prof)
}

// twoS7150s is a rig on a host with two old-GIM S7150s, carving the first.
func twoS7150s(t *testing.T) (r *rig, a, b pci.Address) {
	t.Helper()
	a, b = pci.MustParseAddress("0000:03:00.0"), pci.MustParseAddress("0000:41:00.0")
	host := simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{{Model: "s7150", Address: a}, {Model: "s7150", Address: b}}}
	return newRigOn(t, host, a), a, b
}

// Old GIM takes its VF count only at load: a carve to another split
// reloads it with vf_num (never a write to sriov_numvfs, which it refuses),
// GIM saves the count, and after a reboot the same carve only binds.
func TestGIMCarveReloads(t *testing.T) {
	r := newRig(t, "s7150")
	carveVia(t, r, "s7150-2g", carve.OpGIMReload, "reload gim with vf_num=4")
	conf := r.k.GIMConfig()
	if !strings.Contains(conf, "\nvf_num=4\n") {
		t.Fatalf("/etc/gim_config = %q, want vf_num=4 saved by gim", conf)
	}

	// A reboot: gim loads from the saved file, the carve only binds.
	host := r.k.Host()
	host.Files = map[string]string{"/etc/gim_config": conf}
	r2 := newRigOn(t, host, r.gpu)
	res := r2.mustDo(t, "s7150-2g")
	if hasOp(res.Plan, carve.OpGIMReload) || len(res.Plan.Ops) != 4 {
		t.Fatalf("after a reboot with vf_num=4 saved, plan:\n%s", res.Plan)
	}
	checkCarried(t, r2, "s7150-2g")
}

// A modprobe that fails, unloading or loading, leaves the GPU as it was
// and says which step failed.
func TestGIMModprobeFails(t *testing.T) {
	ctx := context.Background()
	tool := sysfs.DefaultToolPaths()[sysfs.ToolModprobe]
	for n, want := range map[int]string{1: "unload gim", 2: "load gim with vf_num=2"} {
		r := newRig(t, "s7150")
		r.mustDo(t, "s7150-1g")
		before := snapshot(t, r.k)
		r.k.InjectFault(simkernel.Fault{Path: tool, Nth: n, Errno: syscall.EIO})
		_, err := r.do(ctx, "s7150-4g", carve.Options{})
		if !errors.Is(err, carve.ErrVendorTool) || !strings.Contains(err.Error(), want) || errors.Is(err, carve.ErrUndo) {
			t.Fatalf("modprobe run %d failing: err = %v, want %q, undone", n, err, want)
		}
		checkUnchanged(t, fmt.Sprintf("modprobe run %d failing", n), before, snapshot(t, r.k))
		checkCarried(t, r, "s7150-1g")
	}
}

// A reload cut off after the unload (a crash) leaves gim out of the
// kernel; the next carve loads it.
func TestGIMRepairsUnloaded(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "s7150")
	if _, err := r.k.RunTool(ctx, sysfs.ToolModprobe, "-r", "gim"); err != nil {
		t.Fatal(err)
	}
	r.mustDo(t, "s7150-2g")
	checkCarried(t, r, "s7150-2g")
}

// The reload re-creates every GIM GPU's VFs: it is refused while another
// GIM GPU has VFs on vfio-pci, and while a VF of this one is in use.
func TestGIMReloadRefusals(t *testing.T) {
	ctx := context.Background()
	r, _, b := twoS7150s(t)
	r.mustDo(t, "s7150-2g")
	// B already has gim's 4 VFs: the same split only binds them.
	if res, err := r.c.Carve(ctx, vgpu.GPU(b), "s7150-2g", carve.Options{}); err != nil || hasOp(res.Plan, carve.OpGIMReload) {
		t.Fatalf("carve B to the same split: %v\n%s", err, res.Plan)
	}
	before := snapshot(t, r.k)
	_, err := r.c.Carve(ctx, vgpu.GPU(b), "s7150-1g", carve.Options{Force: true})
	if !errors.Is(err, carve.ErrGIMShared) || !strings.Contains(err.Error(), "0000:03:00.0") {
		t.Fatalf("carve B to another split while A is carved: %v", err)
	}
	checkUnchanged(t, "a refused carve", before, snapshot(t, r.k))
	if _, err := r.c.Uncarve(ctx, vgpu.GPU(b), carve.Options{}); err != nil {
		t.Fatal(err)
	}
	// A's VF in use blocks the reload A's re-split needs.
	g := r.gpuNow(t)
	hold(t, r.k, pci.GroupDevicePath(g.SRIOV.VFs[1].IOMMUGroup))
	_, err = r.do(ctx, "s7150-1g", carve.Options{})
	var iu *carve.InUseError
	if !errors.As(err, &iu) {
		t.Fatalf("re-split with a VF in use: %v", err)
	}
}

// GIM's scheduler is a profile attribute: a profile that differs only in it
// reloads gim with the same count and the other sched_option, and the GPU
// is then seen to carry that profile.
func TestGIMScheduler(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "s7150")
	r.mustDo(t, "s7150-2g")
	res := r.mustDo(t, "s7150-2g-liquid")
	if !strings.Contains(res.Plan.String(), "reload gim with vf_num=4 sched_option=2 sched_interval=0") {
		t.Fatalf("plan:\n%s", res.Plan)
	}
	checkCarried(t, r, "s7150-2g-liquid")
	if g := r.gpuNow(t); g.GIM == nil || g.GIM.SchedOption != 2 || carve.ProfileOf(g, r.cat) != "s7150-2g-liquid" {
		t.Fatalf("gim state %+v", g.GIM)
	}
	if !strings.Contains(r.k.GIMConfig(), "sched_option=2\nvf_num=4\n") {
		t.Fatalf("/etc/gim_config = %q", r.k.GIMConfig())
	}
	// Back to the default scheduler: passed explicitly, or the saved file
	// would keep liquid.
	r.mustDo(t, "s7150-2g")
	checkCarried(t, r, "s7150-2g")
	if !strings.Contains(r.k.GIMConfig(), "sched_option=0\nvf_num=4\n") {
		t.Fatalf("/etc/gim_config = %q", r.k.GIMConfig())
	}
	// A scheduler on a GPU gim does not drive is refused.
	m := newRig(t, "mi25")
	if _, err := m.c.Carve(ctx, vgpu.GPU(m.gpu), "s7150-2g-liquid", carve.Options{}); err == nil {
		t.Fatal("an S7150 profile carved an MI25")
	}
}

// GVT-g's counts are what available_instances says, not the type names: a
// 256 MB aperture has room for two _8 and one _4, and a carve asking for
// more is refused before any write, naming the room and the fix.
func TestGVTgRoomFromAperture(t *testing.T) {
	ctx := context.Background()
	host := simkernel.Host{Version: "v1", I915EnableGVT: true, KVMGT: true, GPUs: []simkernel.HostGPU{{Model: "gvtg", ApertureMB: 256}}}
	r := newRigOn(t, host, gpuAddr["gvtg"])
	for _, p := range []string{"gvtg-4", "gvtg-7"} {
		_, err := r.do(ctx, p, carve.Options{})
		if err == nil || !strings.Contains(err.Error(), "has room for") || !strings.Contains(err.Error(), "aperture") {
			t.Fatalf("carve %s with a 256 MB aperture: %v", p, err)
		}
	}
	if n := len(r.rec.Writes()); n != 0 {
		t.Fatalf("refused carves wrote %d times", n)
	}
	// The default 1024 MB aperture fits seven _8.
	r = newRig(t, "gvtg")
	r.mustDo(t, "gvtg-7")
	checkCarried(t, r, "gvtg-7")
}

// A caller that gives every GIM GPU one profile (vgpud's reconcile of a
// validated config) lets a reload take the other GIM GPUs' free VFs off
// vfio-pci; their own carve then rebinds them. A VF in use still blocks.
func TestGIMSiblingsTaken(t *testing.T) {
	ctx := context.Background()
	r, a, b := twoS7150s(t)
	for _, g := range []pci.Address{a, b} {
		if _, err := r.c.Carve(ctx, vgpu.GPU(g), "s7150-2g", carve.Options{GIMSiblings: true}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := r.c.Carve(ctx, vgpu.GPU(a), "s7150-1g", carve.Options{GIMSiblings: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Plan.String(), "unbind 0000:41:00.1") {
		t.Fatalf("plan does not take B's VFs:\n%s", res.Plan)
	}
	if res, err := r.c.Carve(ctx, vgpu.GPU(b), "s7150-1g", carve.Options{GIMSiblings: true}); err != nil || hasOp(res.Plan, carve.OpGIMReload) {
		t.Fatalf("carve B after the reload: %v\n%s", err, res.Plan)
	}
	for _, g := range []pci.Address{a, b} {
		gp, err := inventory.Get(r.k, nil, g)
		if err != nil {
			t.Fatal(err)
		}
		if p := carve.ProfileOf(gp, r.cat); p != "s7150-1g" {
			t.Fatalf("%s carries %q", g, p)
		}
	}
	// B's VF in use: the reload A's re-split needs is refused.
	gb, _ := inventory.Get(r.k, nil, b)
	hold(t, r.k, pci.GroupDevicePath(gb.SRIOV.VFs[0].IOMMUGroup))
	var iu *carve.InUseError
	if _, err := r.c.Carve(ctx, vgpu.GPU(a), "s7150-2g", carve.Options{GIMSiblings: true}); !errors.As(err, &iu) {
		t.Fatalf("re-split with B's VF in use: %v", err)
	}
}
