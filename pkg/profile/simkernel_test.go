package profile_test

import (
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

// The built-in catalog fits the fake kernel's device models as the
// inventory reads them: every profile of every model resolves, before and
// after the VFs are enabled. This is what keeps the catalog's type ids and
// names and the fake kernel's in step. The A100 whose VFs take mdevs has
// a host of its own: one NVIDIA host driver gives VFs mdevs or types.
func TestCatalogOnFakeKernel(t *testing.T) {
	c, err := profile.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, gs := range [][]struct{ model, addr string }{
		{
			{simkernel.ModelS7150, "0000:3d:00.0"},
			{simkernel.ModelMI25, "0000:03:00.0"},
			{simkernel.ModelT4, "0000:3b:00.0"},
			{simkernel.ModelL40S, "0000:86:00.0"},
			{simkernel.ModelGVTg, "0000:00:02.0"},
			{simkernel.ModelPlain, "0000:0a:00.0"},
		},
		{{simkernel.ModelA100, "0000:65:00.0"}},
	} {
		host := simkernel.Host{Version: simkernel.HostVersion, NUMANodes: 1, I915EnableGVT: true, KVMGT: true}
		for _, g := range gs {
			host.GPUs = append(host.GPUs, simkernel.HostGPU{Model: g.model, Address: pci.MustParseAddress(g.addr)})
		}
		k, err := simkernel.New(host)
		if err != nil {
			t.Fatal(err)
		}
		check := func(when string) {
			t.Helper()
			gpus, err := inventory.Discover(k, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(gpus) != len(host.GPUs) {
				t.Fatalf("%s: inventory found %d GPUs, want %d", when, len(gpus), len(host.GPUs))
			}
			for _, g := range gpus {
				ps := c.ForGPU(g)
				if len(ps) == 0 {
					t.Errorf("%s: no profile for %s (%04x:%04x)", when, g.Address, g.VendorID, g.DeviceID)
				}
				for _, p := range ps {
					pl, err := c.Resolve(p.Name, g)
					if err != nil {
						t.Errorf("%s: %v", when, err)
						continue
					}
					// Found by name either way; equal ids mean both follow the real driver.
					if pl.MdevType != p.Mdev.ID || pl.NVIDIATypeID != p.NVIDIA.ID {
						t.Errorf("%s: %s: the fake kernel numbers its type %s/%d, the catalog %s/%d",
							when, p.Name, pl.MdevType, pl.NVIDIATypeID, p.Mdev.ID, p.NVIDIA.ID)
					}
				}
			}
		}
		check("after boot")

		// Enable every VF of the A100 and the L40S: their types now show on
		// the VFs and are checked against the catalog.
		for _, g := range gs {
			if g.model != simkernel.ModelA100 && g.model != simkernel.ModelL40S {
				continue
			}
			if err := sysfstest.EnableVFs(k, g.addr, 0); err != nil { // sriov-manage enables every VF
				t.Fatal(err)
			}
		}
		check("with VFs enabled")
	}
}
