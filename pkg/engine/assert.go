package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/api/convert"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// AssertInput is what Assert compares.
type AssertInput struct {
	FS      sysfs.FS
	Catalog *profile.Catalog
	Config  *config.Config
	// Ledger, when not nil, adds the GPUs vgpud carved for an earlier config
	// (they should carry nothing now) and the allocations whose vGPU is
	// missing. A read-only ledger will do.
	Ledger *ledger.Ledger
	// MIG reads MIG-backed GPUs' instances; nil (or no NVML) judges them
	// by their VFs' types alone.
	MIG nvstate.Manager
	// MdevctlDir is mdevctl's definitions directory: a config managing a
	// parent mdevctl starts mdevs on is refused. "" checks nothing.
	MdevctlDir string
}

// Assert compares the host with a config without changing anything, in the
// manner of mig-parted's assert: per GPU, the profile wanted and the one
// carried, with the ops a reconcile would apply; and the allocated vGPUs
// that are not on the host. Match is true when there is nothing of either.
func Assert(ctx context.Context, in AssertInput) api.AssertReport {
	rep := api.AssertReport{Config: in.Config.Path, GPUs: []api.Drift{}, Missing: []api.Missing{}}
	gpus, err := inventory.Discover(in.FS, nil)
	if err != nil {
		rep.Error = fmt.Sprintf("discover the host's GPUs: %v", err)
		return rep
	}
	as, err := in.Config.Desired(gpus, in.Catalog)
	if err == nil {
		err = checkMdevctl(in.FS, in.MdevctlDir, in.Config, as, nil)
	}
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	var drivers carve.DriverStore = noDrivers{}
	var carved []ledger.Carved
	var allocs []ledger.Allocation
	if in.Ledger != nil {
		drivers = in.Ledger
		if carved, err = in.Ledger.CarvedGPUs(); err == nil {
			allocs, err = in.Ledger.Allocations()
		}
		if err != nil {
			rep.Error = err.Error()
			return rep
		}
	}
	var copts []carve.Option
	if in.MIG != nil {
		copts = append(copts, carve.WithMIG(in.MIG))
	}
	c := carve.New(in.FS, in.Catalog, drivers, copts...)
	actual := map[pci.Address]string{}
	for i := range gpus {
		c.Enrich(&gpus[i]) // the ids of types the catalog names only
		actual[gpus[i].Address] = carve.ProfileOf(gpus[i], in.Catalog)
	}
	drift := func(g pci.Address, want string, res carve.Result, err error) {
		d := api.Drift{GPU: g.String(), Desired: want, Actual: actual[g], Blocked: convert.Blockers(res.Plan.Blocked)}
		for _, o := range res.Plan.Ops {
			d.Ops = append(d.Ops, o.String())
		}
		if err != nil {
			d.Error = err.Error()
		}
		if d.Error != "" || len(d.Ops) > 0 || d.Desired != d.Actual {
			rep.GPUs = append(rep.GPUs, d)
		}
	}
	wanted := map[pci.Address]bool{}
	for _, a := range as {
		wanted[a.GPU] = true
		res, err := c.Carve(ctx, vgpu.GPU(a.GPU), a.Profile, carve.Options{DryRun: true, GIMSiblings: true, MdevUUIDs: a.MdevUUIDs})
		if err == nil && res.Plan.Empty() {
			// Nothing to change: it carries the profile, also where another
			// profile has the same shape (vgpu_params, a scheduler apart),
			// which ProfileOf cannot tell.
			actual[a.GPU] = a.Profile
		}
		drift(a.GPU, a.Profile, res, err)
	}
	for _, r := range carved {
		if wanted[r.GPU] {
			continue
		}
		res, err := c.Uncarve(ctx, vgpu.GPU(r.GPU), carve.Options{DryRun: true})
		if errors.Is(err, pci.ErrNoDevice) || errors.Is(err, inventory.ErrNotGPU) {
			continue // gone from the host: nothing to uncarve
		}
		drift(r.GPU, "", res, err)
	}
	if len(allocs) > 0 {
		vgpus, err := carve.VGPUs(ctx, in.FS, gpus, nil)
		if err != nil {
			rep.Error = err.Error()
			return rep
		}
		here := map[string]bool{}
		for _, v := range vgpus {
			here[v.ID] = true
		}
		for _, a := range allocs {
			if !here[a.VGPU] && a.State.Holds() {
				rep.Missing = append(rep.Missing, api.Missing{Allocation: apiAllocation(nil, a)})
			}
		}
	}
	rep.Match = len(rep.GPUs) == 0 && len(rep.Missing) == 0
	return rep
}

// Assert compares the host with cfg (the engine's own when nil).
func (e *Engine) Assert(ctx context.Context, cfg *config.Config) api.AssertReport {
	if cfg == nil {
		cfg = e.Config()
	}
	e.host.RLock()
	defer e.host.RUnlock()
	return Assert(ctx, AssertInput{FS: e.fs, Catalog: e.catalog, Config: cfg, Ledger: e.ledger, MIG: e.mig, MdevctlDir: e.mdevctlDir})
}

// noDrivers is the DriverStore of an assert without a ledger: no original
// driver is known, and it is never asked to remember one.
type noDrivers struct{}

func (noDrivers) RememberDriver(pci.Address, string) error { return errors.New("read-only") }
func (noDrivers) OriginalDriver(pci.Address) (string, bool, error) {
	return "", false, nil
}
func (noDrivers) ForgetDriver(pci.Address) error { return errors.New("read-only") }
