package carve_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// drivers reads the drivers of devs now.
func drivers(t *testing.T, r *rig, devs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range devs {
		drv, err := pci.CurrentDriver(r.k, pci.MustParseAddress(d))
		if err != nil {
			t.Fatal(err)
		}
		out[d] = drv
	}
	return out
}

func wantDrivers(t *testing.T, r *rig, want map[string]string) {
	t.Helper()
	for dev, w := range want {
		if got := drivers(t, r, dev)[dev]; got != w {
			t.Errorf("%s on %q, want %q", dev, got, w)
		}
	}
}

// A GPU the catalog does not know is passed through by the built-in
// profile: its card goes to vfio-pci, the GPU then carries passthrough,
// and the uncarve gives each function its own driver back and forgets it.
func TestPassthroughWithoutCatalogEntry(t *testing.T) {
	ctx := context.Background()
	gpu, audio := "0000:01:00.0", "0000:01:00.1"
	r := newRigOn(t, oneGPU(simkernel.ModelRTX4090, pci.MustParseAddress(gpu)), pci.MustParseAddress(gpu))
	before := snapshot(t, r.k)
	g := r.gpuNow(t)
	if ps := r.cat.ForGPU(g); len(ps) != 1 || ps[0].Name != profile.Passthrough {
		t.Fatalf("profiles for the RTX 4090: %v, want the built-in passthrough alone", ps)
	}
	r.mustDo(t, profile.Passthrough)
	wantDrivers(t, r, map[string]string{gpu: "vfio-pci", audio: "vfio-pci"})
	g = r.gpuNow(t)
	if p := carve.ProfileOf(g, r.cat); p != profile.Passthrough {
		t.Errorf("ProfileOf = %q, want passthrough", p)
	}
	if res, err := r.do(ctx, profile.Passthrough, carve.Options{DryRun: true}); err != nil || !res.Plan.Empty() {
		t.Errorf("carving it again plans %v, %v; want nothing", res.Plan, err)
	}
	if res, err := r.do(ctx, "", carve.Options{}); err != nil {
		t.Fatalf("uncarve: %v\n%s", err, res.Plan)
	}
	wantDrivers(t, r, map[string]string{gpu: "nouveau", audio: "snd_hda_intel"})
	for _, a := range []string{gpu, audio} {
		if d, ok, err := r.store.OriginalDriver(pci.MustParseAddress(a)); ok || err != nil {
			t.Errorf("%s: the store still remembers %q (%v)", a, d, err)
		}
	}
	if d := sysfstest.Diff(before, snapshot(t, r.k)); d != "" {
		t.Errorf("the host after carve and uncarve differs:\n%s", d)
	}
}

// The console's GPU is refused, a dry run too, with the reason and
// nothing changed; --force passes it through and the uncarve gives it
// back. Another GPU of the host passes without force.
func TestPassthroughConsoleGPU(t *testing.T) {
	ctx := context.Background()
	igpu := pci.MustParseAddress("0000:00:02.0")
	r := newRigOn(t, simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{
		{Model: simkernel.ModelGVTg, BootVGA: true},
		{Model: simkernel.ModelRTX4090, Address: pci.MustParseAddress("0000:01:00.0")},
	}}, igpu)
	before := snapshot(t, r.k)
	for _, dry := range []bool{true, false} {
		_, err := r.do(ctx, profile.Passthrough, carve.Options{DryRun: dry})
		if !errors.Is(err, carve.ErrHostConsole) || errors.Is(err, carve.ErrGroupShared) || !strings.Contains(err.Error(), "drives the host's console (boot_vga 1)") || !strings.Contains(err.Error(), "--force") {
			t.Errorf("passthrough of the console's GPU (dry run %v): %v", dry, err)
		}
	}
	checkUnchanged(t, "a refused passthrough", before, snapshot(t, r.k))
	if _, err := r.do(ctx, profile.Passthrough, carve.Options{Force: true}); err != nil {
		t.Fatalf("forced: %v", err)
	}
	wantDrivers(t, r, map[string]string{igpu.String(): "vfio-pci"})
	r.mustDo(t, "")
	wantDrivers(t, r, map[string]string{igpu.String(): "i915"})
	if _, err := r.c.Carve(ctx, vgpu.GPU(pci.MustParseAddress("0000:01:00.0")), profile.Passthrough, carve.Options{}); err != nil {
		t.Errorf("the RTX 4090 beside it: %v", err)
	}
}

// A host device in the GPU's IOMMU group: refused without force (the
// catalog's profile and the built-in alike); forced, it goes to vfio-pci
// with the GPU, and the uncarve gives it its driver back.
func TestPassthroughSharedGroupForced(t *testing.T) {
	ctx := context.Background()
	r, _ := sharedGroupRig(t)
	before := snapshot(t, r.k)
	for _, prof := range []string{profile.Passthrough, "rtx3090-full"} {
		if _, err := r.do(ctx, prof, carve.Options{DryRun: true}); !errors.Is(err, carve.ErrGroupShared) || !strings.Contains(err.Error(), "0000:65:01.0 (class 010802, on nvme)") {
			t.Errorf("%s: %v", prof, err)
		}
	}
	res, err := r.do(ctx, profile.Passthrough, carve.Options{Force: true})
	if err != nil {
		t.Fatalf("forced: %v\n%s", err, res.Plan)
	}
	wantDrivers(t, r, map[string]string{"0000:65:00.0": "vfio-pci", "0000:65:00.1": "vfio-pci", "0000:65:01.0": "vfio-pci", "0000:64:00.0": "pcieport"})
	r.mustDo(t, "")
	wantDrivers(t, r, map[string]string{"0000:65:00.0": "nouveau", "0000:65:00.1": "snd_hda_intel", "0000:65:01.0": "nvme"})
	if d := sysfstest.Diff(before, snapshot(t, r.k)); d != "" {
		t.Errorf("the host after the forced carve and the uncarve differs:\n%s", d)
	}
}

// Without an IOMMU nothing is passed through: the refusal names the fix,
// and nothing changes.
func TestPassthroughWithoutIOMMU(t *testing.T) {
	ctx := context.Background()
	gpu := pci.MustParseAddress("0000:00:06.0")
	r := newRigOn(t, simkernel.Host{Version: "v1", Guest: simkernel.GuestQEMU, NoIOMMU: true,
		GPUs: []simkernel.HostGPU{{Model: simkernel.ModelH200, Address: gpu, NUMANode: -1}}}, gpu)
	before := snapshot(t, r.k)
	for _, opt := range []carve.Options{{DryRun: true}, {}, {Force: true}} {
		_, err := r.do(ctx, profile.Passthrough, opt)
		if !errors.Is(err, profile.ErrCannotSplit) || !strings.Contains(err.Error(), inventory.ReasonNoIOMMU) {
			t.Errorf("%+v: %v", opt, err)
		}
	}
	checkUnchanged(t, "a refused passthrough", before, snapshot(t, r.k))
}
