package alloc

import (
	"context"

	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// Revoke takes back allocations Grant made, each only while it is as
// granted: reserved for the same domain since the same moment. One that
// was attached, unreserved or granted again since is left alone, so a
// revoke never takes what someone else made of it. It returns what it
// deleted. A lease that Grant turned into an allocation is not restored.
func (a *Allocator) Revoke(ctx context.Context, granted []ledger.Allocation) ([]ledger.Allocation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []ledger.Allocation
	err := a.ledger.Update(func(tx *ledger.Tx) error {
		for _, g := range granted {
			cur, ok, err := tx.Allocation(g.VGPU)
			if err != nil {
				return err
			}
			if !ok || cur.DomainUUID != g.DomainUUID || cur.State != ledger.StateReserved || !cur.Since.Equal(g.Since) {
				continue
			}
			if _, _, err := tx.DeleteAllocation(g.VGPU); err != nil {
				return err
			}
			out = append(out, cur)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
