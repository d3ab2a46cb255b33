package carve_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// askingNVML counts what it is asked: VGPUTypes answers the L40S-12Q,
// Virtualization virt; every other call is none of a look's business.
type askingNVML struct {
	nvstate.Manager
	virt        nvstate.Virt
	types, virs int
}

func (a *askingNVML) VGPUTypes(pci.Address) ([]nvstate.VGPUType, error) {
	a.types++
	return []nvstate.VGPUType{{ID: 1153, Name: "NVIDIA L40S-12Q"}}, nil
}

// Sizes answers nothing: NVML states no sizes here, which changes nothing.
func (a *askingNVML) Sizes(pci.Address) (nvstate.Sizes, error) {
	return nvstate.Sizes{}, nvstate.ErrUnavailable
}

func (a *askingNVML) Virtualization(pci.Address) (nvstate.Virt, error) {
	a.virs++
	return a.virt, nil
}

// NVML is asked for vGPU types only under the vGPU host driver: the
// datacenter driver has none, and asking would only start vgpu-nvml.
func TestEnrichAsksTypesOfTheVGPUHostDriverOnly(t *testing.T) {
	_, cat, _ := nameOnlyL40S(t)
	for _, c := range []struct {
		kind  string
		types int
	}{{simkernel.NVIDIAVGPUHost, 1}, {simkernel.NVIDIADatacenter, 0}} {
		k, err := simkernel.New(simkernel.Host{NVIDIADriverKind: c.kind, GPUs: []simkernel.HostGPU{{Model: simkernel.ModelL40S, Address: gpuAddr["l40s"]}}})
		if err != nil {
			t.Fatal(err)
		}
		g, err := inventory.Get(k, nil, gpuAddr["l40s"])
		if err != nil {
			t.Fatal(err)
		}
		m := &askingNVML{}
		carve.EnrichWith(m, cat, &g)
		if m.types != c.types || m.virs != 0 {
			t.Errorf("%s: NVML asked for types %d times, virtualization %d; want %d and 0", c.kind, m.types, m.virs, c.types)
		}
	}
}

// Where the PCI topology does not say, NVML's virtualization mode tells a
// guest from a board whose firmware hides SR-IOV (GuestWith, for listings
// that say why); where it does, NVML is not asked.
func TestEnrichAsksNVMLWhetherGuest(t *testing.T) {
	cat, err := profile.Load()
	if err != nil {
		t.Fatal(err)
	}
	gpu := pci.MustParseAddress("0000:00:06.0")
	for _, c := range []struct {
		guest string
		virt  nvstate.Virt
		asked int
		want  string
	}{
		{simkernel.GuestQEMU, nvstate.Virt{}, 0, "this OS is a guest (its PCI host bridge 0000:00:00.0 is QEMU's"},
		{"", nvstate.Virt{Mode: nvstate.VirtPassthrough}, 1, "this OS is a guest (NVML says the GPU is passed through to this VM: virtualization mode passthrough)"},
		{"", nvstate.Virt{Mode: nvstate.VirtNone}, 1, "SR-IOV off in firmware"},
	} {
		k, err := simkernel.New(simkernel.Host{Guest: c.guest, NVIDIADriverKind: simkernel.NVIDIADatacenter,
			GPUs: []simkernel.HostGPU{{Model: simkernel.ModelH200, Address: gpu}}})
		if err != nil {
			t.Fatal(err)
		}
		g, err := inventory.Get(k, nil, gpu)
		if err != nil {
			t.Fatal(err)
		}
		m := &askingNVML{virt: c.virt}
		carve.EnrichWith(m, cat, &g)
		if m.virs != 0 {
			t.Errorf("EnrichWith asked NVML's virtualization mode: only listings that say why do")
		}
		carve.GuestWith(m, &g)
		why := ""
		for _, u := range g.Unavailable {
			if u.Dialect == inventory.DialectNVIDIAVF {
				why = u.Reason
			}
		}
		if m.virs != c.asked || m.types != 0 || !strings.Contains(why, c.want) {
			t.Errorf("guest %q, NVML %+v: asked %d (types %d), nvidia-vf %q; want %d asks and %q", c.guest, c.virt, m.virs, m.types, why, c.asked, c.want)
		}
	}
}

// The catalog adds what inventory cannot know: an S7150 (AMD, no NVIDIA
// tables) whose SR-IOV capability does not show is sriov-unavailable.
func TestCatalogUnavailable(t *testing.T) {
	cat, err := profile.Load()
	if err != nil {
		t.Fatal(err)
	}
	g := inventory.GPU{VendorID: 0x1002, DeviceID: 0x6929, IOMMUGroup: 5, Dialects: []inventory.Dialect{inventory.DialectPassthrough}}
	carve.CatalogUnavailable(cat, &g)
	if len(g.Unavailable) != 1 || g.Unavailable[0].Dialect != inventory.DialectSRIOV || !strings.Contains(g.Unavailable[0].Reason, "SR-IOV off in firmware") {
		t.Errorf("unavailable %+v", g.Unavailable)
	}
	carve.CatalogUnavailable(cat, &g) // once per dialect
	if len(g.Unavailable) != 1 {
		t.Errorf("twice: %+v", g.Unavailable)
	}
}

// A carve refused for want of an SR-IOV capability says why as gpus --why
// does: on a guest whose host bridge is not QEMU's (the real H200 VM of
// docs/real-hosts.md), NVML's virtualization mode tells it, not firmware
// advice; on bare metal the firmware advice stays. NVML is asked only on
// the refusal.
func TestCarveRefusalAsksNVMLWhetherGuest(t *testing.T) {
	gpu := pci.MustParseAddress("0000:00:06.0")
	for _, c := range []struct {
		virt      nvstate.Virt
		want, not string
	}{
		{nvstate.Virt{Mode: nvstate.VirtPassthrough}, "this OS is a guest (NVML says the GPU is passed through to this VM", "firmware"},
		{nvstate.Virt{Mode: nvstate.VirtNone}, "SR-IOV off in firmware", "guest"},
	} {
		r := newRigOn(t, simkernel.Host{NVIDIADriverKind: simkernel.NVIDIADatacenter,
			GPUs: []simkernel.HostGPU{{Model: simkernel.ModelH200, Address: gpu}}}, gpu)
		m := &askingNVML{virt: c.virt}
		dir := t.TempDir()
		cv := carve.New(r.rec, r.cat, r.store, carve.WithLocker(carve.NewLocker(dir)), carve.WithMIG(m))
		_, err := cv.Carve(context.Background(), vgpu.GPU(gpu), "h200x-1-18c", carve.Options{DryRun: true})
		if !errors.Is(err, profile.ErrCannotSplit) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), c.not) {
			t.Errorf("NVML %+v: carve --dry-run: %v; want ErrCannotSplit saying %q, not %q", c.virt, err, c.want, c.not)
		}
		if m.virs != 1 || m.types != 0 {
			t.Errorf("NVML %+v: asked virtualization %d times, types %d; want 1 and 0", c.virt, m.virs, m.types)
		}
	}
}
