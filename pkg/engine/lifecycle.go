package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vgpu-project/vgpu/internal/change"
	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/nvvf"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// A domain's vGPUs go: Reserve (vgpuctl attach; reserved) -> Prepare (hook
// prepare/begin; made ready, attached) -> Release (hook release/end; per
// onRelease: keep = reserved again, destroy = mdevs removed) -> Unreserve
// (vgpuctl detach; freed). A domain migrating in gets a Lease, which
// Prepare turns into allocations.

// Reserve gives the domain req.Count vGPUs of req.Profile, reserved. It only
// writes the ledger; idempotent (alloc.Allocate).
func (e *Engine) Reserve(ctx context.Context, req alloc.Request) (api.Holdings, error) {
	h, _, err := e.ReserveGranted(ctx, req)
	return h, err
}

// ReserveGranted is Reserve, and also returns the allocations it made now
// (not those the domain held already): what Revoke takes back when the
// caller hung up before the answer reached it.
func (e *Engine) ReserveGranted(ctx context.Context, req alloc.Request) (h api.Holdings, granted []ledger.Allocation, err error) {
	defer func(start time.Time) { observe(e.metrics, opAllocate, start, err) }(time.Now())
	e.host.RLock()
	defer e.host.RUnlock()
	v, err := e.currentView(ctx, false)
	if err != nil {
		return h, nil, err
	}
	cs, err := e.candidates(ctx, v, req.Profile, nil)
	if err != nil {
		return h, nil, err
	}
	as, granted, err := e.alloc.Grant(ctx, req, cs)
	if err != nil {
		return h, nil, err
	}
	e.log.Info("reserved", "domain", req.DomainName, "domainUUID", req.DomainUUID, "profile", req.Profile, "vgpus", idList(as))
	return api.Holdings{Allocations: apiAllocations(v, as), Leases: []api.Lease{}}, granted, nil
}

// Revoke takes back what a reservation granted, as far as it is still as
// granted (alloc.Revoke): its caller hung up before the answer reached it.
func (e *Engine) Revoke(ctx context.Context, granted []ledger.Allocation) ([]ledger.Allocation, error) {
	e.host.RLock()
	defer e.host.RUnlock()
	gone, err := e.alloc.Revoke(ctx, granted)
	if err == nil && len(gone) > 0 {
		e.log.Info("reservation taken back: its caller hung up before the answer", "domain", gone[0].DomainName,
			"domainUUID", gone[0].DomainUUID, "vgpus", idList(gone))
	}
	return gone, err
}

// Lease holds req.Count vGPUs for a domain migrating in, until now+ttl.
// A dry run answers with what it would hold and holds nothing.
func (e *Engine) Lease(ctx context.Context, req alloc.Request, ttl time.Duration, dry bool) (h api.Holdings, err error) {
	if !dry {
		defer func(start time.Time) { observe(e.metrics, opLease, start, err) }(time.Now())
	}
	e.host.RLock()
	defer e.host.RUnlock()
	v, err := e.currentView(ctx, false)
	if err != nil {
		return h, err
	}
	cs, err := e.candidates(ctx, v, req.Profile, nil)
	if err != nil {
		return h, err
	}
	if cs, err = e.canReceive(cs, req.Profile); err != nil {
		return h, err
	}
	lease, verb := e.alloc.Lease, "leased"
	if dry {
		lease, verb = e.alloc.WouldLease, "would lease (dry run)"
	}
	ls, err := lease(ctx, req, cs, ttl)
	if err != nil {
		return h, err
	}
	h = api.Holdings{Allocations: []api.Allocation{}, Leases: apiLeases(v, ls)}
	e.log.Info(verb, "domain", req.DomainName, "domainUUID", req.DomainUUID, "profile", req.Profile, "ttl", ttl)
	return h, nil
}

// canReceive drops from cs the VFs of profile that sit on plain vfio-pci
// although their model migrates: vfio-pci has no VFIO migration, so QEMU
// could not load a VF's state into one (Intel xe's VFs need xe-vfio-pci,
// loaded when the GPU was carved). None left is a refusal saying why.
func (e *Engine) canReceive(cs []alloc.Candidate, profile string) ([]alloc.Candidate, error) {
	p, ok := e.catalog.Get(profile)
	if !ok || p.Model.Migration == nil {
		return cs, nil
	}
	plain := func(c alloc.Candidate) bool {
		return c.Profile == profile && c.Kind == vgpu.KindVF && c.Driver == pci.VFIOPCI
	}
	kept := slices.DeleteFunc(slices.Clone(cs), plain)
	n := len(cs) - len(kept)
	if n == 0 {
		return cs, nil
	}
	if !slices.ContainsFunc(kept, func(c alloc.Candidate) bool { return c.Profile == profile }) {
		return nil, fmt.Errorf("%w: the %d VFs of %s here are on vfio-pci, which cannot receive a VF's migration state (Intel xe: modprobe xe-vfio-pci, then vgpuctl apply carves them onto it)",
			alloc.ErrNoCapacity, n, profile)
	}
	return kept, nil
}

// DropLeases drops the domain's leases: its migration failed.
func (e *Engine) DropLeases(ctx context.Context, domainUUID string) (api.Holdings, error) {
	e.host.RLock()
	defer e.host.RUnlock()
	ls, err := e.alloc.DropLeases(ctx, domainUUID)
	if err != nil {
		return api.Holdings{}, err
	}
	return api.Holdings{Allocations: []api.Allocation{}, Leases: apiLeases(nil, ls)}, nil
}

// Unreserve frees the domain's allocations (all, or vgpu's) and, when all,
// its leases. An attached vGPU is refused (alloc.ErrAttached) while a VFIO
// user (its VM's QEMU) holds it; one its running VM let go of (vgpuctl
// detach --live unplugged it) is freed like a reserved one.
func (e *Engine) Unreserve(ctx context.Context, domainUUID, vgpu string) (h api.Holdings, err error) {
	defer func(start time.Time) { observe(e.metrics, opUnreserve, start, err) }(time.Now())
	// Shared: a prepare swapping this domain's mdev finishes first.
	e.host.RLock()
	defer e.host.RUnlock()
	if err := e.demoteUnplugged(ctx, domainUUID, vgpu); err != nil {
		return h, err
	}
	as, err := e.alloc.Unreserve(ctx, domainUUID, vgpu)
	if err != nil {
		return h, err
	}
	h = api.Holdings{Allocations: apiAllocations(nil, as), Leases: []api.Lease{}}
	if vgpu == "" {
		ls, err := e.alloc.DropLeases(ctx, domainUUID)
		if err != nil {
			return h, err
		}
		h.Leases = apiLeases(nil, ls)
	}
	if len(as) > 0 {
		e.log.Info("unreserved", "domainUUID", domainUUID, "vgpus", idList(as))
	}
	return h, nil
}

// demoteUnplugged moves the domain's attached allocations (all, or
// vgpu's) that no VFIO user holds back to reserved: the VM runs, but
// without them. A vGPU still open stays attached, and Unreserve refuses it.
func (e *Engine) demoteUnplugged(ctx context.Context, domainUUID, vgpu string) error {
	if vgpu != "" {
		id, err := alloc.VGPUID(vgpu)
		if err != nil {
			return err
		}
		vgpu = id
	}
	canon, err := alloc.DomainUUID(domainUUID)
	if err != nil {
		return err
	}
	var held []ledger.Allocation
	if err := e.ledger.View(func(tx *ledger.Tx) error {
		held, err = tx.DomainAllocations(canon)
		return err
	}); err != nil {
		return err
	}
	usage := carve.VFIOUsage{FS: e.fs}.Snapshot()
	for _, a := range held {
		if a.State != ledger.StateAttached || vgpu != "" && a.VGPU != vgpu {
			continue
		}
		_, in, err := usage.Holder(ctx, a.VGPU)
		if errors.Is(err, carve.ErrUseUnknown) {
			// Fail closed: it may still be open; it stays attached.
			e.log.Warn("cannot tell whether an attached vGPU is still in use; leaving it attached", "domain", a.DomainName, "vgpu", a.VGPU, "err", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("check whether vGPU %s of domain %s is still in use: %w", a.VGPU, a.DomainName, err)
		}
		if in {
			continue
		}
		if err := change.Begin(ctx); err != nil {
			return err
		}
		if _, err := e.ledger.SetState(a.VGPU, ledger.StateReserved); err != nil {
			return err
		}
		e.log.Info("attached vGPU no longer in use by its VM: reserved", "domain", a.DomainName, "domainUUID", canon, "vgpu", a.VGPU)
	}
	return nil
}

// Prepare makes the vGPUs a domain XML names (ids: VF addresses or mdev
// UUIDs) ready for its VM and marks the domain's allocations attached.
//
// A VF id must be the domain's (reserved, or leased to it) or free, and is
// then allocated; a VF that drifted (off vfio-pci, or an NVIDIA VF whose
// type a release cleared) is made ready again. An mdev UUID that exists is
// treated the same way; one that does not exist yet is made by a swap (see
// swapMdev) from a carved mdev of the profile: the one the domain reserved
// at attach time, else its lease, else a free one chosen by the allocator
// (least-loaded GPU). Kernel work runs under the host lock, inside intents.
func (e *Engine) Prepare(ctx context.Context, req alloc.Request, ids []string) (h api.Holdings, err error) {
	defer func(start time.Time) { observe(e.metrics, opPrepare, start, err) }(time.Now())
	canon := make([]string, len(ids))
	for i, id := range ids {
		if canon[i], err = alloc.VGPUID(id); err != nil {
			return h, err
		}
	}
	if req.Count == 0 {
		req.Count = len(canon)
	}
	e.host.Lock()
	defer e.host.Unlock()
	defer e.invalidate()
	owners, full, err := e.prepareScope(req, canon)
	if err != nil {
		return h, err
	}
	// Only the GPUs the prepare hands out from are read, unless it must
	// choose from the host's free pool.
	look := func() (*hostView, error) {
		if full {
			return e.currentView(ctx, true)
		}
		return e.viewOf(ctx, owners)
	}
	v, err := look()
	if err != nil {
		return h, err
	}
	for _, id := range canon {
		if x, ok := v.vgpu(id); ok && e.Changing(x.GPU) {
			return h, changingErr(id, req.DomainName, x.GPU)
		}
	}
	// The first write follows: from here the prepare finishes even if its
	// caller hangs up.
	if err := change.Begin(ctx); err != nil {
		return h, err
	}
	readied := false
	for _, id := range canon {
		if _, ok := v.vgpu(id); ok || isUUID(id) {
			continue
		}
		done, err := e.readyVF(ctx, v, req, id)
		if err != nil {
			return h, err
		}
		readied = readied || done
	}
	if readied {
		if v, err = look(); err != nil {
			return h, err
		}
	}
	var present, missing []string
	for _, id := range canon {
		if _, ok := v.vgpu(id); ok || !isUUID(id) {
			present = append(present, id)
		} else {
			missing = append(missing, id)
		}
	}
	// Of the free vGPUs, only those the prepare may take are checked for
	// VFIO users: the ones its XML names and, for a swap, the free pool.
	probe := func(id string) bool { return len(missing) > 0 || slices.Contains(canon, id) }
	cs, err := e.candidates(ctx, v, req.Profile, probe)
	if err != nil {
		return h, err
	}
	// The plugin parameters are written inside the transaction that attaches,
	// once the claims hold: only to vGPUs the domain holds.
	ready := func() error { return e.writeParams(ctx, req.Profile, canon) }
	r := req
	r.Count = len(present)
	var as []ledger.Allocation
	if len(missing) == 0 {
		// One ledger commit: claim, parameters, attach.
		as, err = e.alloc.ClaimAttach(ctx, r, present, cs, ready)
	} else {
		if len(present) > 0 {
			if _, err := e.alloc.Claim(ctx, r, present, cs); err != nil {
				return h, err
			}
		}
		if err := e.swapIn(ctx, v, req, canon, missing, cs); err != nil {
			return h, err
		}
		as, err = e.alloc.ClaimAttach(ctx, req, nil, nil, ready)
	}
	if err != nil {
		return h, err
	}
	// v, read before the claims and any swap, still gives the kinds of the
	// answer: a swapped-in mdev is a UUID, which kindOf knows.
	e.log.Info("prepared", "domain", req.DomainName, "domainUUID", req.DomainUUID, "profile", req.Profile, "vgpus", idList(as))
	return api.Holdings{Allocations: apiAllocations(v, as), Leases: []api.Lease{}}, nil
}

// writeParams gives each NVIDIA vGPU of a prepare its profile's plugin
// parameters (vgpu_params, cleared when the profile sets none), which the
// driver reads when the VM starts: an mdev swapped in is new, and a VF may
// carry an earlier profile's.
func (e *Engine) writeParams(ctx context.Context, prof string, ids []string) error {
	p, ok := e.catalog.Get(prof)
	if !ok || !p.TakesVGPUParams() {
		return nil
	}
	for _, id := range ids {
		// carve's log and errors name the change by its target: an mdev
		// by its UUID (as if a parent: the name is all Run reads of it),
		// a VF by its address.
		op, t := carve.Op{Kind: carve.OpNVParams, UUID: id, Value: p.ParamsLine()}, vgpu.Parent(id)
		if !isUUID(id) {
			a, err := pci.ParseAddress(id)
			if err != nil {
				return fmt.Errorf("set the plugin parameters of %s: %w", id, err)
			}
			op.UUID, op.Device, t = "", a, vgpu.GPU(a)
		}
		if _, err := e.carver.Run(ctx, t, []carve.Op{op}); err != nil {
			return err
		}
	}
	return nil
}

// prepareScope names the GPUs and virtual mdev parents a prepare of ids
// for req's domain works on: the ledger's owner of each id and of what the
// domain holds or leases, a VF's PF, an existing mdev's parent. full: an
// mdev UUID that exists nowhere, with nothing of the domain's to swap into
// it, is made from the free pool of the whole host.
func (e *Engine) prepareScope(req alloc.Request, canon []string) (owners []string, full bool, err error) {
	known := map[string]string{}
	spare := 0 // the domain's mdevs its XML does not name: swap sources
	note := func(vgpu, owner, domain string) {
		known[vgpu] = owner
		if domain == req.DomainUUID {
			owners = append(owners, owner)
			if isUUID(vgpu) && !slices.Contains(canon, vgpu) {
				spare++
			}
		}
	}
	err = e.ledger.View(func(tx *ledger.Tx) error {
		as, err := tx.Allocations()
		if err != nil {
			return err
		}
		for _, a := range as {
			note(a.VGPU, a.Owner(), a.DomainUUID)
		}
		ls, err := tx.Leases()
		for _, l := range ls {
			note(l.VGPU, l.Owner(), l.DomainUUID)
		}
		return err
	})
	if err != nil {
		return nil, false, err
	}
	missing := 0
	for _, id := range canon {
		if o, ok := known[id]; ok {
			owners = append(owners, o)
			continue
		}
		parent := id
		if isUUID(id) {
			in, ok, err := mdev.Get(e.fs, id)
			if err != nil {
				return nil, false, err
			}
			if !ok {
				missing++
				continue
			}
			parent = in.Parent
		}
		a, err := pci.ParseAddress(parent)
		if err != nil { // a virtual parent
			owners = append(owners, parent)
			continue
		}
		pf, isVF, err := sriov.PhysFn(e.fs, a)
		if err != nil {
			return nil, false, err
		}
		if isVF {
			a = pf
		}
		owners = append(owners, a.String())
	}
	return owners, missing > spare, nil
}

// changingErr refuses to prepare vGPU id of a GPU a carve is changing.
func changingErr(id, domain, gpu string) error {
	return fmt.Errorf("prepare %s for %s: %w (%s); start the VM again when it ends", id, domain, ErrChanging, gpu)
}

// swapIn gives each missing mdev UUID an mdev: the domain's reserved or
// leased ones first, then free ones, all through one alloc.Allocate call.
func (e *Engine) swapIn(ctx context.Context, v *hostView, req alloc.Request, canon, missing []string, cs []alloc.Candidate) error {
	r := req
	r.Count = len(canon)
	got, err := e.alloc.Allocate(ctx, r, cs)
	if err != nil {
		return err
	}
	var sources []ledger.Allocation
	for _, a := range got {
		if !slices.Contains(canon, a.VGPU) {
			sources = append(sources, a)
		}
	}
	if len(sources) != len(missing) {
		return fmt.Errorf("%w: domain %s holds %d vGPUs of %s besides those its XML names, want %d",
			alloc.ErrConflict, req.DomainName, len(sources), req.Profile, len(missing))
	}
	for i, u := range missing {
		m, ok := v.vgpu(sources[i].VGPU)
		if !ok || m.Kind != vgpu.KindMdev {
			return fmt.Errorf("%w: vGPU %s reserved for domain %s is not an mdev on this host now; reconcile (vgpuctl apply) and start again",
				alloc.ErrConflict, sources[i].VGPU, req.DomainName)
		}
		s := swapIntent{DomainUUID: req.DomainUUID, DomainName: req.DomainName, Profile: req.Profile,
			GPU: sources[i].GPU, From: m.ID, To: u, Parent: m.Parent, Type: m.Type}
		if err := e.swapMdev(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// readyVF makes VF id ready for req's profile when it is a VF of a GPU
// that carries (or should carry) the profile and no other domain holds it:
// bound to its VFIO driver (sriov: vfio-pci, or xe-vfio-pci), or given the NVIDIA type (nvidia-vf). It
// reports whether it changed anything; when the VF does not qualify it does
// nothing and Claim explains why.
func (e *Engine) readyVF(ctx context.Context, v *hostView, req alloc.Request, id string) (bool, error) {
	addr, err := pci.ParseAddress(id)
	if err != nil {
		return false, nil
	}
	var g inventory.GPU
	found, index := false, 0
	for _, x := range v.gpus {
		if x.SRIOV == nil {
			continue
		}
		if i := slices.IndexFunc(x.SRIOV.VFs, func(vf inventory.VF) bool { return vf.Address == addr }); i >= 0 {
			g, found, index = x, true, x.SRIOV.VFs[i].Index
		}
	}
	if !found {
		return false, nil
	}
	if e.Changing(g.Address.String()) {
		return false, changingErr(id, req.DomainName, g.Address.String())
	}
	a, held, err := e.ledger.Allocation(id)
	if err != nil {
		return false, err
	}
	if held && (a.DomainUUID != req.DomainUUID || a.Profile != req.Profile) {
		return false, nil
	}
	if !held && v.desired[g.Address] != req.Profile && v.actual[g.Address] != req.Profile {
		return false, nil
	}
	if l, ok, err := e.ledger.Lease(id); err != nil || ok && l.DomainUUID != req.DomainUUID {
		return false, err
	}
	pl, err := e.catalog.Resolve(req.Profile, g)
	if err != nil {
		return false, err
	}
	// The VF by its index: carve remembers no driver of a VF, which goes
	// when its PF's VFs do.
	var what string
	var op carve.Op
	switch pl.Dialect {
	case inventory.DialectSRIOV:
		what = "bind VF " + id + " to " + pl.VFDriver
		op = carve.Op{Kind: carve.OpDriver, Device: g.Address, VF: &index, To: pl.VFDriver}
	case inventory.DialectNVIDIAVF:
		what = fmt.Sprintf("set the vGPU type of VF %s to %d", id, pl.NVIDIATypeID)
		op = carve.Op{Kind: carve.OpNVType, Device: g.Address, VF: &index, Count: pl.NVIDIATypeID}
	default:
		return false, nil
	}
	change := func() error {
		_, err := e.carver.Run(ctx, vgpu.GPU(g.Address), []carve.Op{op})
		return err
	}
	unlock, err := e.locks.Lock(ctx, vgpu.GPU(g.Address))
	if err != nil {
		return false, err
	}
	defer unlock()
	err = e.inIntent(ledger.IntentAllocate, vgpu.GPU(g.Address), "prepare "+req.DomainName+": "+what, nil, change)
	if err != nil {
		return false, fmt.Errorf("prepare vGPU %s for domain %s: %w", id, req.DomainName, err)
	}
	e.log.Info("vGPU made ready again", "domain", req.DomainName, "vgpu", id, "change", what)
	return true, nil
}

// releaseIntent is the data of a release intent (policy destroy).
type releaseIntent struct {
	DomainUUID string   `json:"domainUUID"`
	DomainName string   `json:"domainName"`
	Mdevs      []string `json:"mdevs,omitempty"`
	NVIDIAVFs  []string `json:"nvidiaVFs,omitempty"`
}

// Release handles the stop of a domain's VM by the config's onRelease:
// keep: its allocations go back to reserved, the kernel is not touched;
// destroy: its mdevs are removed and their allocations deleted (then the
// GPUs are reconciled so their pools are whole again), the NVIDIA types of
// its VFs are cleared (their allocations stay reserved: the VF address is
// in the domain XML), VFs stay bound. Nothing held is not an error.
func (e *Engine) Release(ctx context.Context, domainUUID string) (res api.ReleaseResult, err error) {
	defer func(start time.Time) { observe(e.metrics, opRelease, start, err) }(time.Now())
	if domainUUID, err = alloc.DomainUUID(domainUUID); err != nil {
		return res, err
	}
	policy := e.Config().OnRelease
	res = api.ReleaseResult{Policy: string(policy), Kept: []api.Allocation{}}
	if policy != config.ReleaseDestroy {
		e.host.RLock()
		defer e.host.RUnlock()
		if _, err := e.alloc.MarkStopped(ctx, domainUUID); err != nil {
			return res, err
		}
		h, err := e.Holdings(ctx, domainUUID)
		res.Kept = h.Allocations
		if len(res.Kept) > 0 {
			e.log.Info("released (keep)", "domainUUID", domainUUID, "kept", len(res.Kept))
		}
		return res, err
	}
	e.host.Lock()
	defer e.host.Unlock()
	defer e.invalidate()
	v, err := e.currentView(ctx, true)
	if err != nil {
		return res, err
	}
	if err := change.Begin(ctx); err != nil {
		return res, err
	}
	var ri releaseIntent
	var id uint64
	err = e.ledger.Update(func(tx *ledger.Tx) error {
		held, err := tx.DomainAllocations(domainUUID)
		if err != nil || len(held) == 0 {
			return err
		}
		ri = releaseIntent{DomainUUID: domainUUID, DomainName: held[0].DomainName}
		for _, a := range held {
			st := ledger.StateReserved
			switch kindOf(v, a.VGPU) {
			case vgpu.KindMdev:
				ri.Mdevs, st = append(ri.Mdevs, a.VGPU), ledger.StateReleasing
			case vgpu.KindNVIDIAVF:
				ri.NVIDIAVFs = append(ri.NVIDIAVFs, a.VGPU)
			}
			if _, err := tx.SetState(a.VGPU, st); err != nil {
				return err
			}
		}
		id, err = tx.BeginIntentData(ledger.IntentRelease, held[0].GPU, "destroy for "+ri.DomainName, ri)
		return err
	})
	if err != nil || id == 0 {
		return res, err
	}
	destroyed, cleared, kerr := e.releaseKernel(ctx, ri)
	gpus := map[string]bool{}
	err = e.ledger.Update(func(tx *ledger.Tx) error {
		for _, u := range ri.Mdevs {
			a, ok, err := tx.Allocation(u)
			if err != nil || !ok {
				return err
			}
			if slices.Contains(destroyed, u) {
				gpus[a.Owner()] = true
				_, _, err = tx.DeleteAllocation(u)
			} else { // not removed (in use?): the domain keeps it
				_, err = tx.SetState(u, ledger.StateReserved)
			}
			if err != nil {
				return err
			}
		}
		return tx.EndIntent(id)
	})
	if err != nil {
		return res, errors.Join(kerr, err)
	}
	res.Destroyed, res.Cleared = destroyed, cleared
	if h, herr := e.Holdings(ctx, domainUUID); herr == nil {
		res.Kept = h.Allocations
	}
	e.log.Info("released (destroy)", "domain", ri.DomainName, "domainUUID", domainUUID, "destroyed", destroyed, "cleared", cleared)
	if len(gpus) > 0 {
		rep := e.reconcileLocked(ctx, e.Config(), ReasonRelease, gpus)
		res.Reconcile = &rep
	}
	return res, kerr
}

// releaseKernel removes the mdevs and clears the NVIDIA types of a release,
// each on its own: one that fails leaves the others done.
func (e *Engine) releaseKernel(ctx context.Context, ri releaseIntent) (destroyed, cleared []string, err error) {
	var errs []error
	for _, u := range ri.Mdevs {
		if err := e.removeMdev(ctx, u); err != nil {
			errs = append(errs, fmt.Errorf("release mdev %s of domain %s: %w", u, ri.DomainName, err))
			continue
		}
		destroyed = append(destroyed, u)
	}
	for _, id := range ri.NVIDIAVFs {
		addr, err := pci.ParseAddress(id)
		if err == nil {
			err = e.clearType(ctx, addr)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("release NVIDIA VF %s of domain %s: %w", id, ri.DomainName, err))
			continue
		}
		cleared = append(cleared, id)
	}
	return destroyed, cleared, errors.Join(errs...)
}

// clearType frees NVIDIA VF addr's vGPU. A VF off the nvidia driver has
// no type to clear: that is an error, as the kernel has no file to write.
func (e *Engine) clearType(ctx context.Context, addr pci.Address) error {
	if _, _, ok, err := nvvf.Read(e.fs, addr); err != nil || !ok {
		return cmp.Or(err, fmt.Errorf("clear the vGPU type of %s: %w at %s", addr, nvvf.ErrNoNVIDIADir, nvvf.Dir(addr)))
	}
	_, err := e.carver.Run(ctx, vgpu.GPU(addr), []carve.Op{{Kind: carve.OpNVType, Device: addr}})
	return err
}

// removeMdev removes mdev u, if it exists.
func (e *Engine) removeMdev(ctx context.Context, u string) error {
	in, ok, err := mdev.Get(e.fs, u)
	if err != nil || !ok {
		return err
	}
	t, err := vgpu.ParseTarget(in.Parent)
	if err != nil {
		return fmt.Errorf("remove mdev %s: %w", u, err)
	}
	_, err = e.carver.Run(ctx, t, []carve.Op{{Kind: carve.OpMdevRemove, Parent: in.Parent, Type: in.Type, UUID: u}})
	return err
}

func idList(as []ledger.Allocation) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.VGPU
	}
	return strings.Join(s, " ")
}
