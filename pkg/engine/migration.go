package engine

import (
	"context"
	"fmt"

	"github.com/vgpu-project/vgpu/internal/change"
	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// Migration moves the source's record of a domain migrating out (vgpuctl
// migrate) through its phases; each is idempotent, so a run interrupted
// at any point is settled by running the phase again:
//
//	begin:    attached -> migrating (nothing else may touch them)
//	commit:   every allocation and lease of the domain freed: it left
//	rollback: migrating -> attached: the VM still runs here
func (e *Engine) Migration(ctx context.Context, domainUUID, phase string) (api.Holdings, error) {
	canon, err := alloc.DomainUUID(domainUUID)
	if err != nil {
		return api.Holdings{}, err
	}
	e.host.RLock()
	defer e.host.RUnlock()
	switch phase {
	case api.MigrationBegin, api.MigrationRollback:
		from, to := ledger.StateAttached, ledger.StateMigrating
		if phase == api.MigrationRollback {
			from, to = to, from
		}
		var out []ledger.Allocation
		err = e.ledger.Update(func(tx *ledger.Tx) error {
			if err := change.Begin(ctx); err != nil {
				return err
			}
			held, err := tx.DomainAllocations(canon)
			if err != nil {
				return err
			}
			for _, a := range held {
				if a.State != from && a.State != to {
					continue
				}
				if a, err = tx.SetState(a.VGPU, to); err != nil {
					return err
				}
				out = append(out, a)
			}
			if phase == api.MigrationBegin && len(out) == 0 && len(held) > 0 {
				return fmt.Errorf("%w: domain %s holds %d vGPUs here, none attached: its VM does not run here with them",
					alloc.ErrConflict, canon, len(held))
			}
			return nil
		})
		if err != nil {
			return api.Holdings{}, err
		}
		if len(out) > 0 {
			e.log.Info("migration "+phase, "domain", out[0].DomainName, "domainUUID", canon, "vgpus", idList(out))
		}
		return api.Holdings{Allocations: apiAllocations(nil, out), Leases: []api.Lease{}}, nil
	case api.MigrationCommit:
		h, err := e.freeAll(ctx, canon)
		if err == nil && len(h.Allocations) > 0 {
			e.log.Info("migrated out: vGPUs free", "domain", h.Allocations[0].DomainName, "domainUUID", canon, "vgpus", len(h.Allocations))
		}
		return h, err
	}
	return api.Holdings{}, fmt.Errorf("%w: migration phase %q: want %s, %s or %s", alloc.ErrInvalid, phase,
		api.MigrationBegin, api.MigrationCommit, api.MigrationRollback)
}
