package virtmigrate

import (
	"context"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
)

// vgpudLedger is migrate.Ledger over the source vgpud's API.
type vgpudLedger struct {
	c    *client.Client
	uuid string
}

func (l vgpudLedger) phase(ctx context.Context, p string) error {
	_, err := l.c.Migration(ctx, l.uuid, p)
	return err
}

func (l vgpudLedger) Begin(ctx context.Context) error    { return l.phase(ctx, api.MigrationBegin) }
func (l vgpudLedger) Commit(ctx context.Context) error   { return l.phase(ctx, api.MigrationCommit) }
func (l vgpudLedger) Rollback(ctx context.Context) error { return l.phase(ctx, api.MigrationRollback) }

func (l vgpudLedger) Migrating(ctx context.Context) (bool, error) {
	h, err := l.c.Allocations(ctx)
	if err != nil {
		return false, err
	}
	for _, a := range h.Allocations {
		if a.DomainUUID == l.uuid && a.State == "migrating" {
			return true, nil
		}
	}
	return false, nil
}

// noLedger is the ledger of a domain without vGPUs: nothing to hand over.
type noLedger struct{}

func (noLedger) Begin(context.Context) error             { return nil }
func (noLedger) Commit(context.Context) error            { return nil }
func (noLedger) Rollback(context.Context) error          { return nil }
func (noLedger) Migrating(context.Context) (bool, error) { return false, nil }
