package alloc

import (
	"cmp"
	"context"
	"slices"

	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// Claim gives the domain the vGPUs named by ids (device addresses or mdev
// UUIDs, as its domain XML names them), reserved, in one transaction.
// req.Count must be len(ids). Each id must be a vGPU of req.Profile in host;
// it may be the domain's already (kept), leased to the domain (the lease
// becomes the allocation) or free (allocated now). One held by another
// domain, leased to one, being released, or in use outside vgpud is refused
// (ErrConflict) and nothing is recorded. NUMA placement does not apply: the
// ids are the caller's choice. The result is sorted by vGPU id.
func (a *Allocator) Claim(ctx context.Context, req Request, ids []string, host []Candidate) ([]ledger.Allocation, error) {
	return a.ClaimWith(ctx, req, ids, host, nil)
}

// ClaimWith is Claim that also runs also, when not nil, in the claim's
// transaction: a caller's intent begins in the same commit as the claim
// it covers.
func (a *Allocator) ClaimWith(ctx context.Context, req Request, ids []string, host []Candidate, also func(*ledger.Tx) error) ([]ledger.Allocation, error) {
	canon, err := claimIDs(req, ids)
	if err != nil {
		return nil, err
	}
	var out []ledger.Allocation
	err = a.reserve(ctx, &req, host, func(tx *ledger.Tx, p *pool) error {
		if out, err = p.claim(tx, canon, host); err != nil {
			return err
		}
		if also != nil {
			return also(tx)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ClaimAttach is Claim of ids (none: nothing claimed), then ready, then
// Attach, in one ledger transaction: a VM start commits (and fsyncs) once.
// ready (nil: none) runs inside the transaction once the claims hold, for
// the kernel work that may only touch vGPUs the domain holds; its error
// rolls the claims and the attach back. Returns what Attach returns.
func (a *Allocator) ClaimAttach(ctx context.Context, req Request, ids []string, host []Candidate, ready func() error) ([]ledger.Allocation, error) {
	attach := func(tx *ledger.Tx, domainUUID string) ([]ledger.Allocation, error) {
		if ready != nil {
			if err := ready(); err != nil {
				return nil, err
			}
		}
		held, err := tx.DomainAllocations(domainUUID)
		if err != nil {
			return nil, err
		}
		return attachHeld(tx, domainUUID, held)
	}
	var out []ledger.Allocation
	if len(ids) == 0 {
		err := a.forDomain(ctx, req.DomainUUID, func(tx *ledger.Tx, domainUUID string) (err error) {
			out, err = attach(tx, domainUUID)
			return err
		})
		return out, err
	}
	canon, err := claimIDs(req, ids)
	if err != nil {
		return nil, err
	}
	err = a.reserve(ctx, &req, host, func(tx *ledger.Tx, p *pool) error {
		if _, err := p.claim(tx, canon, host); err != nil {
			return err
		}
		out, err = attach(tx, p.req.DomainUUID)
		return err
	})
	return out, err
}

// claimIDs checks the ids of a claim: vGPU ids, none twice, req.Count of them.
func claimIDs(req Request, ids []string) ([]string, error) {
	canon := make([]string, len(ids))
	for i, id := range ids {
		c, err := VGPUID(id)
		if err != nil {
			return nil, err
		}
		if slices.Contains(canon[:i], c) {
			return nil, invalid(ErrBadVGPU, "vGPU %s is named twice", c)
		}
		canon[i] = c
	}
	if req.Count != len(ids) {
		return nil, invalid(ErrBadCount, "count %d does not match the %d vGPUs named", req.Count, len(ids))
	}
	return canon, nil
}

// claim records canon as the pool's domain's in tx (Claim), sorted by id.
func (p *pool) claim(tx *ledger.Tx, canon []string, host []Candidate) ([]ledger.Allocation, error) {
	var out []ledger.Allocation
	for _, id := range canon {
		i := slices.IndexFunc(p.vgpus, func(c Candidate) bool { return c.ID == id })
		if i < 0 {
			return nil, p.absent(id, host)
		}
		c := p.vgpus[i]
		if al, ok := p.alloc[id]; ok {
			switch {
			case al.DomainUUID != p.req.DomainUUID:
				return nil, refuse(ErrConflict, "vGPU %s is %s", id, al.Holder())
			case al.State == ledger.StateReleasing:
				return nil, refuse(ErrConflict, "vGPU %s is being released by domain %s; try again once the release is done", id, al.DomainName)
			}
			al, err := p.keep(tx, al)
			if err != nil {
				return nil, err
			}
			out = append(out, al)
			continue
		}
		le, leased := p.lease[id]
		switch {
		case leased && le.DomainUUID != p.req.DomainUUID:
			return nil, refuse(ErrConflict, "vGPU %s is %s", id, le.Holder())
		case !leased && c.InUse:
			return nil, refuse(ErrConflict, "vGPU %s is in use outside vgpud (%s)", id, c.Holder)
		}
		al, err := p.grant(tx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, al)
	}
	slices.SortFunc(out, func(x, y ledger.Allocation) int { return cmp.Compare(x.VGPU, y.VGPU) })
	return out, nil
}

// absent explains why id is not in the pool: not on the host, or carrying
// another profile.
func (p *pool) absent(id string, host []Candidate) error {
	for _, c := range host {
		if c.ID != id {
			continue
		}
		if c.Profile == "" {
			return refuse(ErrNoSuchVGPU, "vGPU %s on %s carries no profile of the catalog, not %s (is its GPU as the host config says? vgpuctl assert)", id, c.GPU, p.req.Profile)
		}
		return refuse(ErrNoSuchVGPU, "vGPU %s on %s is a %s vGPU, not %s", id, c.GPU, c.Profile, p.req.Profile)
	}
	return refuse(ErrNoSuchVGPU, "vGPU %s is not on this host (vgpuctl vgpus lists them)", id)
}

// MarkStopped moves the domain's attached allocations back to reserved:
// its VM stopped and, by the keep policy, the domain keeps its vGPUs for
// its next start. Nothing attached is not an error: a stop may be repeated.
func (a *Allocator) MarkStopped(ctx context.Context, domainUUID string) ([]ledger.Allocation, error) {
	return a.domain(ctx, domainUUID, func(tx *ledger.Tx, held []ledger.Allocation) ([]ledger.Allocation, error) {
		var out []ledger.Allocation
		for _, al := range held {
			if al.State != ledger.StateAttached {
				continue
			}
			al, err := tx.SetState(al.VGPU, ledger.StateReserved)
			if err != nil {
				return nil, err
			}
			out = append(out, al)
		}
		return out, nil
	})
}

// Unreserve deletes the domain's allocations, or only that of vgpu when it
// is not "". Attached ones are refused (ErrAttached): the VM runs with
// them. A vgpu the domain does not hold is ErrNotAllocated; a domain that
// holds nothing is not an error, so a detach may be repeated. Nothing is
// deleted when anything is refused.
func (a *Allocator) Unreserve(ctx context.Context, domainUUID, vgpu string) ([]ledger.Allocation, error) {
	if vgpu != "" {
		var err error
		if vgpu, err = VGPUID(vgpu); err != nil {
			return nil, err
		}
	}
	return a.domain(ctx, domainUUID, func(tx *ledger.Tx, held []ledger.Allocation) ([]ledger.Allocation, error) {
		var out []ledger.Allocation
		for _, al := range held {
			if vgpu != "" && al.VGPU != vgpu {
				continue
			}
			switch al.State {
			case ledger.StateAttached:
				return nil, &refusal{kinds: []error{ErrAttached, ErrConflict},
					msg: "vGPU " + al.VGPU + " is " + al.Holder() + ", whose VM runs; stop the VM first"}
			case ledger.StateMigrating:
				return nil, &refusal{kinds: []error{ErrAttached, ErrConflict},
					msg: "vGPU " + al.VGPU + " is " + al.Holder() + "; let vgpuctl migrate finish, or run it again to settle an interrupted one"}
			}
			out = append(out, al)
		}
		if vgpu != "" && len(out) == 0 {
			return nil, refuse(ErrNotAllocated, "domain %s does not hold vGPU %s", domainUUID, vgpu)
		}
		for _, al := range out {
			if _, _, err := tx.DeleteAllocation(al.VGPU); err != nil {
				return nil, err
			}
		}
		return out, nil
	})
}
