package carve_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/pci/pcitest"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// gpuAddr is where every single-GPU test host puts its GPU.
var gpuAddr = map[string]pci.Address{
	"mi25":  pci.MustParseAddress("0000:03:00.0"),
	"s7150": pci.MustParseAddress("0000:03:00.0"),
	"t4":    pci.MustParseAddress("0000:3b:00.0"),
	"a100":  pci.MustParseAddress("0000:41:00.0"),
	"l40s":  pci.MustParseAddress("0000:86:00.0"),
	"gvtg":  pci.MustParseAddress("0000:00:02.0"),
	"plain": pci.MustParseAddress("0000:65:00.0"),
	// Intel xe (Battlemage): VF scheduling in sriov_admin/.
	"arc-pro-b50": pci.MustParseAddress("0000:05:00.0"),
	// New AMD GIM: VF count by amd-smi.
	"mi300x": pci.MustParseAddress("0000:05:00.0"),
	"v710":   pci.MustParseAddress("0000:05:00.0"),
}

type rig struct {
	k     *simkernel.Kernel
	rec   *sysfstest.Recorder
	c     *carve.Carver
	cat   *profile.Catalog
	store *carve.FileDriverStore
	gpu   pci.Address
}

func newRig(t *testing.T, model string) *rig {
	t.Helper()
	if model == b50Migratable {
		return xeRig70(t, true)
	}
	addr := gpuAddr[model]
	host := oneGPU(model, addr)
	// A GVT-g host loads kvmgt with i915.enable_gvt=1, or i915 has no mdev parent.
	host.I915EnableGVT = model == simkernel.ModelGVTg
	host.KVMGT = host.I915EnableGVT
	return newRigOn(t, host, addr)
}

// oneGPU is a host with one GPU, model at addr.
func oneGPU(model string, addr pci.Address) simkernel.Host {
	return simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{{Model: model, Address: addr}}}
}

// newRigOn is a rig on host, carving the GPU at addr.
func newRigOn(t *testing.T, host simkernel.Host, addr pci.Address) *rig {
	t.Helper()
	k, err := simkernel.New(host)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := profile.Load()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &rig{k: k, rec: sysfstest.Record(k), cat: cat, gpu: addr,
		store: carve.NewFileDriverStore(filepath.Join(dir, "drivers.json"))}
	r.c = carve.New(r.rec, cat, r.store, carve.WithLocker(carve.NewLocker(filepath.Join(dir, "locks"))),
		carve.WithToolRetry(3, time.Millisecond))
	return r
}

// do carves profile ("" = uncarve).
func (r *rig) do(ctx context.Context, prof string, opt carve.Options) (carve.Result, error) {
	if prof == "" {
		return r.c.Uncarve(ctx, vgpu.GPU(r.gpu), opt)
	}
	return r.c.Carve(ctx, vgpu.GPU(r.gpu), prof, opt)
}

func (r *rig) gpuNow(t *testing.T) inventory.GPU {
	t.Helper()
	g, err := inventory.Get(r.k, nil, r.gpu)
	if err != nil {
		t.Fatal(err)
	}
	r.c.Enrich(&g) // NVML's types, for a catalog naming types only
	return g
}

// checkLeanLabel checks that a lean read of the rig's GPU (a prepare's:
// available_instances only where mdev.Counted) labels it as full, the
// full read, does, and that it skipped every other type's counter.
func checkLeanLabel(t *testing.T, r *rig, full inventory.GPU) {
	t.Helper()
	lean, err := inventory.Get(mdev.LeanWithTypeCache(r.k, mdev.NewTypeCache()), nil, r.gpu)
	if err != nil {
		t.Fatal(err)
	}
	r.c.Enrich(&lean)
	if got, want := carve.ProfileOf(lean, r.cat), carve.ProfileOf(full, r.cat); got != want {
		t.Fatalf("lean read labelled %s %q, the full read %q", r.gpu, got, want)
	}
	if len(lean.MdevTypes) != len(full.MdevTypes) {
		t.Fatalf("lean read has %d mdev types, the full read %d", len(lean.MdevTypes), len(full.MdevTypes))
	}
	for i, lt := range lean.MdevTypes {
		ft := full.MdevTypes[i]
		want := ft.AvailableInstances
		if !mdev.Counted(ft) {
			want = mdev.Unread
		}
		if lt.AvailableInstances != want || !slices.Equal(lt.Instances, ft.Instances) {
			t.Fatalf("lean read of type %s: available %d, instances %v; want %d, %v", lt.ID, lt.AvailableInstances, lt.Instances, want, ft.Instances)
		}
	}
}

func snapshot(t *testing.T, f sysfs.FS) map[string]string {
	t.Helper()
	s, err := sysfstest.Snapshot(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// scenario: a GPU model, carves done first (setup), then the change under test.
type scenario struct {
	name  string
	model string
	setup []string
	prof  string // "" = uncarve
}

var scenarios = []scenario{
	{"mi25 fresh to 4:1", "mi25", nil, "mi25-4g"},
	{"mi25 4:1 to 8:1", "mi25", []string{"mi25-4g"}, "mi25-2g"},
	{"mi25 16:1 uncarve", "mi25", []string{"mi25-1g"}, ""},
	{"s7150 fresh to 16:1", "s7150", nil, "s7150-512m"},
	{"s7150 fresh to 4:1 (gim reload)", "s7150", nil, "s7150-2g"},
	{"s7150 4:1 to 8:1 (gim reload)", "s7150", []string{"s7150-2g"}, "s7150-1g"},
	{"s7150 uncarve", "s7150", []string{"s7150-1g"}, ""},
	{"s7150 solid to liquid (gim scheduler)", "s7150", []string{"s7150-2g"}, "s7150-2g-liquid"},
	{"s7150 liquid to 16:1 solid", "s7150", []string{"s7150-2g-liquid"}, "s7150-512m"},
	{"t4 fresh to 4Q", "t4", nil, "t4-4q"},
	{"t4 4Q to 2Q", "t4", []string{"t4-4q"}, "t4-8q"},
	{"t4 uncarve", "t4", []string{"t4-2q"}, ""},
	{"a100 fresh to 10C", "a100", nil, "a100-10c"},
	{"a100 10C to 20C", "a100", []string{"a100-10c"}, "a100-20c"},
	{"a100 uncarve", "a100", []string{"a100-5c"}, ""},
	{"l40s fresh to 12Q", "l40s", nil, "l40s-12q"},
	{"l40s 12Q to 6Q", "l40s", []string{"l40s-12q"}, "l40s-6q"},
	{"l40s 12Q to 24Q", "l40s", []string{"l40s-12q"}, "l40s-24q"},
	{"l40s uncarve", "l40s", []string{"l40s-3q"}, ""},
	{"gvtg fresh to 4", "gvtg", nil, "gvtg-4"},
	{"gvtg 7 to 2", "gvtg", []string{"gvtg-7"}, "gvtg-2"},
	{"b50 fresh to 4:1", "arc-pro-b50", nil, "b50-4g"},
	{"b50 fresh to 4:1 sliced (xe scheduling)", "arc-pro-b50", nil, "b50-4g-sliced"},
	{"b50 4:1 to sliced (same VFs)", "arc-pro-b50", []string{"b50-4g"}, "b50-4g-sliced"},
	{"b50 sliced to 4:1 (back to xe's defaults)", "arc-pro-b50", []string{"b50-4g-sliced"}, "b50-4g"},
	{"b50 sliced to 8:1", "arc-pro-b50", []string{"b50-4g-sliced"}, "b50-2g"},
	{"b50 uncarve", "arc-pro-b50", []string{"b50-4g-sliced"}, ""},
	{"mi300x fresh to 1:1 (gim's VF)", "mi300x", nil, "mi300x-192g"},
	{"mi300x fresh to 8:1 (amd-smi)", "mi300x", nil, "mi300x-24g"},
	{"mi300x 8:1 to 1:1 (amd-smi)", "mi300x", []string{"mi300x-24g"}, "mi300x-192g"},
	{"mi300x uncarve", "mi300x", []string{"mi300x-24g"}, ""},
	{"v710 4:1 to 8:1 (amd-smi)", "v710", []string{"v710-7g"}, "v710-3584m"},
	{"v710 3:1 to 6:1 (amd-smi)", "v710", []string{"v710-9557m"}, "v710-4778m"},
	{"b50 7.0 fresh to 4:1 pinned on xe-vfio-pci", b50Migratable, nil, "b50-4g-pinned"},
	{"b50 7.0 auto 4:1 to pinned (VFs re-created)", b50Migratable, []string{"b50-4g"}, "b50-4g-pinned"},
	{"b50 7.0 sliced to pinned", b50Migratable, []string{"b50-4g-sliced"}, "b50-4g-pinned"},
	{"b50 7.0 pinned to 8:1", b50Migratable, []string{"b50-4g-pinned"}, "b50-2g"},
	{"b50 7.0 pinned uncarve", b50Migratable, []string{"b50-4g-pinned"}, ""},
	{"plain passthrough", "plain", nil, "rtx3090-full"},
	{"plain passthrough undone", "plain", []string{"rtx3090-full"}, ""},
}

func (s scenario) prepare(t *testing.T) *rig {
	t.Helper()
	r := newRig(t, s.model)
	for _, p := range s.setup {
		if _, err := r.do(context.Background(), p, carve.Options{}); err != nil {
			t.Fatalf("setup carve %s: %v", p, err)
		}
	}
	checkLeanLabel(t, r, r.gpuNow(t))
	return r
}

// TestCarveScenarios applies each change, checks the GPU carries what was
// asked, and that a second apply writes nothing.
func TestCarveScenarios(t *testing.T) {
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			r := s.prepare(t)
			before := len(r.rec.Writes())
			res := r.mustDo(t, s.prof)
			if res.Plan.Empty() || res.Applied != len(res.Plan.Ops) {
				t.Fatalf("applied %d of %d ops", res.Applied, len(res.Plan.Ops))
			}
			if len(r.rec.Writes()) == before {
				t.Fatal("the change wrote nothing to sysfs")
			}
			checkCarried(t, r, s.prof)
			// Idempotence: the same change again plans and writes nothing.
			r.checkSettled(t, "second apply", s.prof)
		})
	}
}

// checkCarried checks that the rig's GPU carries prof, or nothing for "".
func checkCarried(t *testing.T, r *rig, prof string) {
	t.Helper()
	g := r.gpuNow(t)
	vs, err := carve.VGPUs(context.Background(), r.k, []inventory.GPU{g}, r.cat)
	if err != nil {
		t.Fatal(err)
	}
	// Labelled with ProfileOf's answer, the listing is the same.
	labelled, err := carve.VGPUsLabelled(context.Background(), r.k, []inventory.GPU{g}, r.cat, []string{carve.ProfileOf(g, r.cat)})
	if err != nil || !reflect.DeepEqual(labelled, vs) {
		t.Fatalf("VGPUsLabelled = %+v, %v; VGPUs = %+v", labelled, err, vs)
	}
	checkLeanLabel(t, r, g)
	if prof == "" {
		if len(vs) != 0 {
			t.Fatalf("uncarve left vGPUs: %+v", vs)
		}
		// Old and new GIM keep their VFs.
		if g.SRIOV != nil && g.SRIOV.NumVFs != 0 && !inventory.IsGIM(g.VendorID, g.DeviceID) && !inventory.IsNewGIM(g.VendorID, g.DeviceID) {
			t.Fatalf("uncarve left %d VFs", g.SRIOV.NumVFs)
		}
		return
	}
	if got := carve.ProfileOf(g, r.cat); got != prof {
		t.Fatalf("GPU carries %q, want %q", got, prof)
	}
	p, _ := r.cat.Get(prof)
	if len(vs) != p.Split {
		t.Fatalf("%d vGPUs, want %d: %+v", len(vs), p.Split, vs)
	}
	for _, v := range vs {
		if v.Profile != prof {
			t.Errorf("vGPU %s profile %q, want %q", v.ID, v.Profile, prof)
		}
	}
}

// TestUndoAtEveryStep fails each write of each change in turn and checks
// the whole host looks as it did before the change.
func TestUndoAtEveryStep(t *testing.T) {
	ctx := context.Background()
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			// A clean run lists the writes the change makes.
			probe := s.prepare(t)
			writes := changeWrites(t, probe, s.prof, carve.Options{})
			if len(writes) == 0 {
				t.Fatal("the change made no writes")
			}
			for i, w := range writes {
				r := s.prepare(t)
				before := snapshot(t, r.k)
				failWrite(r.k, writes, i)
				_, err := r.do(ctx, s.prof, carve.Options{})
				if w.Tool != "" && err == nil {
					// A vendor script goes on past a failed write, as bash
					// does: a fault it survives leaves the change made.
					checkCarried(t, r, s.prof)
					continue
				}
				var want error = syscall.EIO
				if w.Tool != "" {
					want = carve.ErrVendorTool
				}
				if !errors.Is(err, want) {
					t.Fatalf("write %d (%s <- %q, by %q): err = %v, want %v", i+1, w.Path, w.Data, w.Tool, err, want)
				}
				checkUndone(t, fmt.Sprintf("write %d of %d (%s <- %q)", i+1, len(writes), w.Path, w.Data), err, before, snapshot(t, r.k))
			}
		})
	}
}

func TestUncarveRefusesInUse(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "mi25")
	r.mustDo(t, "mi25-4g")
	g := r.gpuNow(t)
	vf := g.SRIOV.VFs[2]
	h := hold(t, r.k, pci.GroupDevicePath(vf.IOMMUGroup))
	before := snapshot(t, r.k)
	for _, change := range []string{"", "mi25-2g"} {
		_, err := r.do(ctx, change, carve.Options{})
		var iu *carve.InUseError
		if !errors.As(err, &iu) || !errors.Is(err, carve.ErrInUse) {
			t.Fatalf("change to %q with %s open: err = %v, want InUseError", change, vf.Address, err)
		}
		if len(iu.Blocked) != 1 || iu.Blocked[0].VGPU != vf.Address.String() {
			t.Fatalf("blocked = %+v, want only %s", iu.Blocked, vf.Address)
		}
		checkUnchanged(t, "refused change", before, snapshot(t, r.k))
	}
	// A carve that keeps the VFs is allowed while one is in use.
	r.checkSettled(t, "re-carve of the same profile", "mi25-4g")
	vs, err := carve.VGPUs(ctx, r.k, []inventory.GPU{g}, r.cat, carve.VFIOUsage{FS: r.k})
	if err != nil {
		t.Fatal(err)
	}
	inUse := 0
	for _, v := range vs {
		if v.InUse {
			inUse++
			if v.ID != vf.Address.String() {
				t.Fatalf("%s reported in use", v.ID)
			}
		}
	}
	if inUse != 1 {
		t.Fatalf("%d vGPUs in use, want 1", inUse)
	}

	// --force proceeds; the kernel waits for the VFIO user to let go.
	pcitest.BlocksUntilReleased(t, "forced uncarve", h, func() error {
		_, err := r.do(ctx, "", carve.Options{Force: true})
		return err
	})
	if n := r.gpuNow(t).SRIOV.NumVFs; n != 0 {
		t.Fatalf("%d VFs after forced uncarve", n)
	}
}

func TestMdevInUse(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "t4")
	r.mustDo(t, "t4-4q")
	g := r.gpuNow(t)
	u := g.MdevTypes[0].Instances
	for _, mt := range g.MdevTypes {
		if len(mt.Instances) > 0 {
			u = mt.Instances
		}
	}
	vs, err := carve.VGPUs(ctx, r.k, []inventory.GPU{g}, r.cat)
	if err != nil {
		t.Fatal(err)
	}
	var grp int
	for _, v := range vs {
		if v.ID == u[0] {
			grp = v.IOMMUGroup
		}
	}
	hold(t, r.k, pci.GroupDevicePath(grp))
	_, err = r.do(ctx, "t4-8q", carve.Options{})
	if !errors.Is(err, carve.ErrInUse) {
		t.Fatalf("re-carve with mdev %s open: %v", u[0], err)
	}
	if res, err := r.do(ctx, "t4-8q", carve.Options{DryRun: true}); err != nil || len(res.Plan.Blocked) != 1 {
		t.Fatalf("dry run: %v, blocked %+v", err, res.Plan.Blocked)
	}
}

func TestPassthroughRestoresOriginalDriver(t *testing.T) {
	r := newRig(t, "plain")
	orig := r.gpuNow(t).Driver
	if orig == "" || orig == "vfio-pci" {
		t.Fatalf("plain model boots on %q", orig)
	}
	r.mustDo(t, "rtx3090-full")
	if d := r.gpuNow(t).Driver; d != "vfio-pci" {
		t.Fatalf("driver after passthrough carve %q", d)
	}
	if d, ok, _ := r.store.OriginalDriver(r.gpu); !ok || d != orig {
		t.Fatalf("remembered %q %v, want %q", d, ok, orig)
	}
	// The card's HD audio function shares the group: it goes along.
	audio := pci.MustParseAddress("0000:65:00.1")
	if d, _ := pci.CurrentDriver(r.k, audio); d != "vfio-pci" {
		t.Fatalf("audio function on %q after the passthrough carve, want vfio-pci", d)
	}
	if d, ok, _ := r.store.OriginalDriver(audio); !ok || d != "snd_hda_intel" {
		t.Fatalf("remembered %q %v for the audio function, want snd_hda_intel", d, ok)
	}
	r.mustDo(t, "")
	if d := r.gpuNow(t).Driver; d != orig {
		t.Fatalf("driver after uncarve %q, want %q", d, orig)
	}
	if d, _ := pci.CurrentDriver(r.k, audio); d != "snd_hda_intel" {
		t.Fatalf("audio function on %q after uncarve, want snd_hda_intel", d)
	}
	if _, ok, _ := r.store.OriginalDriver(audio); ok {
		t.Fatal("the store still remembers the audio function's driver after uncarve")
	}
	if ov, _ := pci.DriverOverride(r.k, r.gpu); ov != "" {
		t.Fatalf("driver_override left as %q", ov)
	}
	if _, ok, _ := r.store.OriginalDriver(r.gpu); ok {
		t.Fatal("the store still remembers a driver after uncarve")
	}
}

func TestWrongProfileRefused(t *testing.T) {
	r := newRig(t, "mi25")
	before := snapshot(t, r.k)
	_, err := r.do(context.Background(), "t4-4q", carve.Options{})
	if !errors.Is(err, profile.ErrWrongGPU) {
		t.Fatalf("t4 profile on an mi25: %v", err)
	}
	_, err = r.do(context.Background(), "no-such", carve.Options{})
	if !errors.Is(err, profile.ErrUnknownProfile) {
		t.Fatalf("unknown profile: %v", err)
	}
	checkUnchanged(t, "refused carve", before, snapshot(t, r.k))
}

func TestConcurrentCarvesSerialise(t *testing.T) {
	r := newRig(t, "mi25")
	ctx := context.Background()
	errs := make(chan error, 2)
	for _, p := range []string{"mi25-4g", "mi25-2g"} {
		go func() {
			_, err := r.do(ctx, p, carve.Options{})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got := carve.ProfileOf(r.gpuNow(t), r.cat)
	if got != "mi25-4g" && got != "mi25-2g" {
		t.Fatalf("after two racing carves the GPU carries %q", got)
	}
}

// VFs bound for vfio-pci appear with the PF's sriov_drivers_autoprobe off,
// so no driver but vfio-pci ever probes them (GIM hosts' pci-stub, amdgpu,
// igbvf in the lab), and the PF's setting is back on after.
func TestVFsNeverProbedByVendorDrivers(t *testing.T) {
	for _, c := range []struct{ model, profile string }{{"mi25", "mi25-4g"}, {"s7150", "s7150-2g"}} {
		r := newRig(t, c.model)
		// Old GIM enabled its VFs at boot, onto pci-stub: only the carve's count.
		boot := len(r.k.ProbeLog())
		r.mustDo(t, c.profile)
		vfs := 0
		for _, p := range r.k.ProbeLog()[boot:] {
			if p.Device == r.gpu.String() || !strings.HasPrefix(p.Device, "0000:03:") {
				continue
			}
			vfs++
			if p.Driver != "vfio-pci" {
				t.Errorf("%s: %s probed VF %s", c.profile, p.Driver, p.Device)
			}
		}
		if vfs == 0 {
			t.Fatalf("%s: no VF was probed at all", c.profile)
		}
		if on, err := sriov.Autoprobe(r.k, r.gpu); err != nil || !on {
			t.Errorf("%s: autoprobe after the carve = %v, %v; want it back on", c.profile, on, err)
		}
	}
}

// sharedGroupRig carves an RTX 3090 (0000:65:00.0) behind a root port
// without ACS, whose group holds the host's NVMe (returned) as well.
func sharedGroupRig(t *testing.T) (*rig, pci.Address) {
	t.Helper()
	gpu, nvme := pci.MustParseAddress("0000:65:00.0"), pci.MustParseAddress("0000:65:01.0")
	return newRigOn(t, simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{
		{Model: "plain", Address: gpu, SharedGroup: true},
		{Model: "qemu-nvme", Address: nvme, SharedGroup: true},
	}}, gpu), nvme
}

// A GPU behind a root port without ACS shares its IOMMU group with the
// port and whatever else sits behind it. The port (a bridge) stays on
// pcieport; a device the host drives refuses the passthrough with its
// name, changing nothing; once it is let go, the passthrough proceeds.
func TestPassthroughSharedGroup(t *testing.T) {
	ctx := context.Background()
	r, nvme := sharedGroupRig(t)
	k := r.k
	before := snapshot(t, k)
	_, err := r.do(ctx, "rtx3090-full", carve.Options{})
	if !errors.Is(err, carve.ErrGroupShared) || !strings.Contains(err.Error(), "0000:65:01.0 (class 010802, on nvme)") || strings.Contains(err.Error(), "0000:64:00.0") {
		t.Fatalf("passthrough with the host's NVMe in the group: %v", err)
	}
	checkUnchanged(t, "a refused passthrough", before, snapshot(t, k))
	if err := pci.Unbind(k, nvme); err != nil {
		t.Fatal(err)
	}
	res, err := r.do(ctx, "rtx3090-full", carve.Options{})
	if err != nil {
		t.Fatalf("passthrough with the NVMe let go: %v\n%s", err, res.Plan)
	}
	for dev, want := range map[string]string{"0000:65:00.0": "vfio-pci", "0000:65:00.1": "vfio-pci", "0000:64:00.0": "pcieport", "0000:65:01.0": ""} {
		if d, _ := pci.CurrentDriver(k, pci.MustParseAddress(dev)); d != want {
			t.Errorf("%s on %q, want %q", dev, d, want)
		}
	}
}
