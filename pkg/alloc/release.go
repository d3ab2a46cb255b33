package alloc

import (
	"context"

	"github.com/vgpu-project/vgpu/internal/change"
	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// A domain's allocations go through: Allocate (reserved) -> Attach when its
// VM runs -> at stop either ReleaseDomain (policy keep: nothing to undo in
// the kernel) or BeginRelease, the kernel work, FinishRelease (policy
// destroy). A crash between the two leaves "releasing" allocations that
// reconcile finds and finishes.

// Attach marks the domain's reserved allocations attached: its VM runs.
// It fails with ErrNotAllocated when the domain holds nothing here.
func (a *Allocator) Attach(ctx context.Context, domainUUID string) ([]ledger.Allocation, error) {
	return a.domain(ctx, domainUUID, func(tx *ledger.Tx, held []ledger.Allocation) ([]ledger.Allocation, error) {
		var out []ledger.Allocation
		for _, al := range held {
			if !al.State.Holds() {
				continue
			}
			al, err := tx.SetState(al.VGPU, ledger.StateAttached)
			if err != nil {
				return nil, err
			}
			out = append(out, al)
		}
		if len(out) == 0 {
			return nil, refuse(ErrNotAllocated, "domain %s holds no vGPU on this host", domainUUID)
		}
		return out, nil
	})
}

// BeginRelease marks every allocation of the domain releasing and returns
// them, for the caller to undo in the kernel what the policy says. Nothing
// held is not an error: a release may be repeated.
func (a *Allocator) BeginRelease(ctx context.Context, domainUUID string) ([]ledger.Allocation, error) {
	return a.domain(ctx, domainUUID, func(tx *ledger.Tx, held []ledger.Allocation) ([]ledger.Allocation, error) {
		out := make([]ledger.Allocation, 0, len(held))
		for _, al := range held {
			al, err := tx.SetState(al.VGPU, ledger.StateReleasing)
			if err != nil {
				return nil, err
			}
			out = append(out, al)
		}
		return out, nil
	})
}

// FinishRelease frees the domain's allocations that are still releasing
// and returns them. What the domain was given again meanwhile (reserved
// or attached) is left alone.
func (a *Allocator) FinishRelease(ctx context.Context, domainUUID string) ([]ledger.Allocation, error) {
	return a.free(ctx, domainUUID, func(al ledger.Allocation) bool { return al.State == ledger.StateReleasing })
}

// ReleaseDomain frees every allocation of the domain and returns them.
// Nothing held is not an error: a release may be repeated.
func (a *Allocator) ReleaseDomain(ctx context.Context, domainUUID string) ([]ledger.Allocation, error) {
	return a.free(ctx, domainUUID, func(ledger.Allocation) bool { return true })
}

// ReleaseVGPU frees one vGPU, whoever holds it; ok is false when it was
// not allocated.
func (a *Allocator) ReleaseVGPU(ctx context.Context, vgpu string) (al ledger.Allocation, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return al, false, err
	}
	if vgpu, err = VGPUID(vgpu); err != nil {
		return al, false, err
	}
	err = a.ledger.Update(func(tx *ledger.Tx) error {
		if err := change.Begin(ctx); err != nil {
			return err
		}
		al, ok, err = tx.DeleteAllocation(vgpu)
		return err
	})
	return al, ok, err
}

// DropLeases removes the domain's leases, live or expired: its incoming
// migration failed or was cancelled.
func (a *Allocator) DropLeases(ctx context.Context, domainUUID string) ([]ledger.Lease, error) {
	var out []ledger.Lease
	err := a.forDomain(ctx, domainUUID, func(tx *ledger.Tx, domainUUID string) error {
		leases, err := tx.Leases()
		if err != nil {
			return err
		}
		for _, le := range leases {
			if le.DomainUUID != domainUUID {
				continue
			}
			if err := tx.DeleteLease(le.VGPU); err != nil {
				return err
			}
			out = append(out, le)
		}
		return nil
	})
	return out, err
}

// free deletes the domain's allocations that match which, in one
// transaction.
func (a *Allocator) free(ctx context.Context, domainUUID string, which func(ledger.Allocation) bool) ([]ledger.Allocation, error) {
	return a.domain(ctx, domainUUID, func(tx *ledger.Tx, held []ledger.Allocation) ([]ledger.Allocation, error) {
		out := make([]ledger.Allocation, 0, len(held))
		for _, al := range held {
			if !which(al) {
				continue
			}
			if _, _, err := tx.DeleteAllocation(al.VGPU); err != nil {
				return nil, err
			}
			out = append(out, al)
		}
		return out, nil
	})
}

// domain runs change on the domain's allocations in one write transaction.
func (a *Allocator) domain(ctx context.Context, domainUUID string,
	change func(*ledger.Tx, []ledger.Allocation) ([]ledger.Allocation, error)) ([]ledger.Allocation, error) {
	var out []ledger.Allocation
	err := a.forDomain(ctx, domainUUID, func(tx *ledger.Tx, domainUUID string) error {
		held, err := tx.DomainAllocations(domainUUID)
		if err != nil {
			return err
		}
		out, err = change(tx, held)
		return err
	})
	return out, err
}

// forDomain checks the domain UUID and runs fn with its canonical form in one
// write transaction.
func (a *Allocator) forDomain(ctx context.Context, domainUUID string, fn func(*ledger.Tx, string) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	domainUUID, err := DomainUUID(domainUUID)
	if err != nil {
		return err
	}
	return a.ledger.Update(func(tx *ledger.Tx) error {
		if err := change.Begin(ctx); err != nil {
			return err
		}
		return fn(tx, domainUUID)
	})
}
