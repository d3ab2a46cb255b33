package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// KnownDomain is one domain libvirt knows, for a ledger rebuild: its XML
// is the live one when it runs, else the persistent one.
type KnownDomain struct {
	UUID   string
	Name   string
	Active bool
	XML    []byte
}

// RebuildReport is what a rebuild put in the new ledger and what it could
// not know.
type RebuildReport struct {
	Carved      []ledger.Carved     `json:"carved"`
	Allocations []ledger.Allocation `json:"allocations"`
	// Notes: what the host and libvirt do not tell, each one line for the
	// admin (a domain's XML that does not parse, a vGPU two domains name,
	// a VFIO user no domain explains, an original driver lost).
	Notes []string `json:"notes"`
}

// ErrLedgerNotEmpty: Rebuild writes only into a new, empty ledger.
var ErrLedgerNotEmpty = errors.New("the ledger to rebuild into is not empty")

// Rebuild fills the engine's ledger, which must be empty, with what the
// host and libvirt show: the GPUs (and virtual parents) that carry the
// config's profile were carved for it, and each vGPU a domain's request
// names is reserved for that domain, attached when it runs. Leases and
// open intents are not rebuilt: they are short-lived, and reconcile repairs
// what an interrupted change left. A running domain wins a vGPU two
// domains name.
func (e *Engine) Rebuild(ctx context.Context, domains []KnownDomain) (RebuildReport, error) {
	var rep RebuildReport
	err := e.ledger.View(func(tx *ledger.Tx) error {
		as, err := tx.Allocations()
		if err != nil {
			return err
		}
		cs, err := tx.CarvedGPUs()
		if err != nil {
			return err
		}
		if len(as)+len(cs) > 0 {
			return fmt.Errorf("rebuild the ledger %s: %w (%d allocations, %d carved GPUs)", e.ledger.Path(), ErrLedgerNotEmpty, len(as), len(cs))
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	v, err := e.currentView(ctx, true)
	if err != nil {
		return rep, err
	}
	note := func(format string, args ...any) { rep.Notes = append(rep.Notes, fmt.Sprintf(format, args...)) }

	rep.Carved = e.rebuildCarved(v, note)
	rep.Allocations = rebuildAllocations(v, domains, note)

	usage := carve.VFIOUsage{FS: e.fs}.Snapshot()
	held := map[string]bool{}
	for _, a := range rep.Allocations {
		held[a.VGPU] = true
	}
	for _, x := range v.vgpus {
		if held[x.ID] || x.Profile == "" {
			continue
		}
		holder, inUse, err := usage.Holder(ctx, x.ID)
		if errors.Is(err, carve.ErrUseUnknown) {
			continue // said once below
		}
		if err != nil {
			return rep, err
		}
		if inUse {
			note("vGPU %s (%s) is open by %s, but no domain libvirt knows names it: it stays free in the ledger, and vgpud will not hand it out while it is open", x.ID, x.Profile, holder)
		}
	}
	if w := usage.Warning(); w != "" {
		note("%s: a vGPU one of them holds stays free in the ledger", w)
	}

	err = e.ledger.Update(func(tx *ledger.Tx) error {
		for _, c := range rep.Carved {
			if err := tx.PutCarved(c.Target(), c.Profile); err != nil {
				return err
			}
		}
		for _, a := range rep.Allocations {
			if err := tx.PutAllocation(a); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("rebuild the ledger %s: %w", e.ledger.Path(), err)
	}
	e.invalidate()
	return rep, nil
}

// rebuildCarved: a GPU the config names carries (wholly or in part: a
// release destroyed one mdev) the config's profile. A GPU carved by hand
// is not recorded, so reconcile never uncarves it.
func (e *Engine) rebuildCarved(v *hostView, note func(string, ...any)) []ledger.Carved {
	var out []ledger.Carved
	for _, g := range v.gpus {
		want := v.desired[g.Address]
		if want == "" {
			continue
		}
		has := v.actual[g.Address] == want
		for _, x := range v.vgpus {
			has = has || x.GPU == g.Address.String() && x.Profile == want
		}
		if !has {
			continue
		}
		out = append(out, ledger.Carved{GPU: g.Address, Profile: want})
		// The driver a passed-through GPU had before vfio-pci was in the ledger.
		if g.Driver == "vfio-pci" {
			note("GPU %s is on vfio-pci for %s; the driver it had before is not known any more: after an uncarve, bind it with `echo %s > /sys/bus/pci/drivers_probe`", g.Address, want, g.Address)
		}
	}
	ps, err := e.Config().DesiredParents(e.catalog)
	if err != nil {
		return out
	}
	for _, p := range ps {
		for _, x := range v.vgpus {
			if x.GPU == p.Parent && x.Profile == p.Profile {
				out = append(out, ledger.Carved{Parent: p.Parent, Profile: p.Profile})
				break
			}
		}
	}
	return out
}

// rebuildAllocations reserves each vGPU a domain's request names for that
// domain: running domains first, so one that runs with a vGPU keeps it
// against a shut-off domain naming the same vGPU.
func rebuildAllocations(v *hostView, domains []KnownDomain, note func(string, ...any)) []ledger.Allocation {
	ds := slices.Clone(domains)
	slices.SortStableFunc(ds, func(a, b KnownDomain) int {
		if a.Active != b.Active {
			if a.Active {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Name, b.Name)
	})
	var out []ledger.Allocation
	owner := map[string]KnownDomain{}
	for _, kd := range ds {
		if !domxml.MayHaveRequest(kd.XML) {
			continue
		}
		d, err := domxml.Parse(kd.XML)
		if err != nil {
			note("domain %s (%s): its XML does not parse, so its vGPUs were not reserved: %v", kd.Name, kd.UUID, err)
			continue
		}
		if d.Request == nil {
			continue
		}
		state := ledger.StateReserved
		if kd.Active {
			state = ledger.StateAttached
		}
		for _, r := range d.Request.VGPUs {
			id := r.ID()
			x, ok := v.vgpu(id)
			switch {
			case !ok && r.Kind == vgpu.KindMdev && !kd.Active:
				continue // an mdev is made at start: a shut-off domain's held nothing
			case !ok:
				note("domain %s (%s) names vGPU %s, which is not on this host: not reserved (vgpuctl detach %s %s, then attach, gives it another)", kd.Name, kd.UUID, id, kd.Name, id)
				continue
			case x.Profile == "":
				note("domain %s (%s) names vGPU %s, which is of no profile now: not reserved", kd.Name, kd.UUID, id)
				continue
			}
			g, parent, err := ledger.ParseOwner(x.GPU)
			if err != nil {
				note("domain %s (%s) names vGPU %s, whose GPU or mdev parent %q no allocation can name: not reserved: %v", kd.Name, kd.UUID, id, x.GPU, err)
				continue
			}
			if prev, taken := owner[id]; taken {
				note("vGPU %s is named by domain %s (%s) and by domain %s (%s): reserved for %s only; fix the other with vgpuctl detach", id, prev.Name, prev.UUID, kd.Name, kd.UUID, prev.Name)
				continue
			}
			owner[id] = kd
			a := ledger.Allocation{VGPU: id, GPU: g, Parent: parent, Profile: x.Profile, DomainUUID: strings.ToLower(d.UUID), DomainName: d.Name, State: state}
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b ledger.Allocation) int { return cmp.Compare(a.VGPU, b.VGPU) })
	return out
}
