package daemon

import (
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/xe"
)

// TestXeMigratableVFs: vgpud's start carves a pinned B50 profile on Linux
// 7.0 with xe-vfio-pci loaded: each VF's VRAM pinned, the VFs on
// xe-vfio-pci; a VF that drifted off it is bound back to it by prepare.
func TestXeMigratableVFs(t *testing.T) {
	a := pci.MustParseAddress("0000:05:00.0")
	k, err := simkernel.New(simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{{Model: simkernel.ModelArcB50, Address: a}},
		XeAdmin: simkernel.XeAdmin70, XeVFIO: true})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, k, "version: v1\ngpus:\n  - address: \"0000:05:00.0\"\n    profile: b50-4g-pinned\n")
	res, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "b50-4g-pinned", Count: 2})
	if err != nil || len(res.Allocations) != 2 {
		t.Fatalf("reserve = %+v, %v", res, err)
	}
	for n := 1; n <= 4; n++ {
		if q, err := xe.ReadQuota(k, a, n); err != nil || q != 3456<<20 {
			t.Fatalf("vf%d vram_quota = %d, %v", n, q, err)
		}
	}
	ids := vgpuIDs(res.Allocations)
	vf := pci.MustParseAddress(ids[1])
	if drv, _ := pci.CurrentDriver(k, vf); drv != xe.VFIODriver {
		t.Fatalf("VF on %q", drv)
	}
	if err := pci.Unbind(k, vf); err != nil {
		t.Fatal(err)
	}
	r.d.engine.HostChanged()
	if _, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "b50-4g-pinned", VGPUs: ids}); err != nil {
		t.Fatal(err)
	}
	if drv, _ := pci.CurrentDriver(k, vf); drv != xe.VFIODriver {
		t.Fatalf("drifted VF on %q after prepare, want %s", drv, xe.VFIODriver)
	}
}

// TestXeLeaseNeedsVariantDriver: a host without xe-vfio-pci carves the
// B50's VFs onto vfio-pci, which cannot take a VF's migration state, so an
// incoming migration's lease (and its dry run) is refused saying why; with
// the module loaded, the same lease is granted.
func TestXeLeaseNeedsVariantDriver(t *testing.T) {
	a := pci.MustParseAddress("0000:05:00.0")
	const cfg = "version: v1\ngpus:\n  - address: \"0000:05:00.0\"\n    profile: b50-4g-pinned\n"
	for _, loaded := range []bool{false, true} {
		k, err := simkernel.New(simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{{Model: simkernel.ModelArcB50, Address: a}},
			XeAdmin: simkernel.XeAdmin70, XeVFIO: loaded})
		if err != nil {
			t.Fatal(err)
		}
		r := start(t, k, cfg)
		for _, dry := range []bool{true, false} {
			h, err := r.c.Lease(bg, domA, api.LeaseRequest{Name: "in01", Profile: "b50-4g-pinned", Count: 1, TTLSeconds: 60, DryRun: dry})
			switch {
			case loaded && (err != nil || len(h.Leases) != 1):
				t.Fatalf("xe-vfio-pci loaded, dry %v: lease = %+v, %v", dry, h, err)
			case !loaded && (err == nil || !strings.Contains(err.Error(), "the 4 VFs of b50-4g-pinned here are on vfio-pci, which cannot receive a VF's migration state")):
				t.Fatalf("no xe-vfio-pci, dry %v: lease = %+v, %v; want the refusal", dry, h, err)
			}
		}
		// A reservation on this host, not a migration, is not concerned.
		if res, err := r.c.Reserve(bg, domB, api.ReserveRequest{Name: "web01", Profile: "b50-4g-pinned", Count: 1}); err != nil || len(res.Allocations) != 1 {
			t.Fatalf("xe-vfio-pci loaded %v: reserve = %+v, %v", loaded, res, err)
		}
	}
}
