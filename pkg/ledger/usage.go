package ledger

import (
	"context"
)

// Holder implements carve.UsageChecker: a vGPU reserved for or attached to
// a domain, or under a live lease, is in use. One being released is not:
// its VM has stopped, and destroying it is what the release does anyway.
func (l *Ledger) Holder(_ context.Context, vgpu string) (holder string, inUse bool, err error) {
	err = l.View(func(tx *Tx) error {
		a, ok, err := tx.Allocation(vgpu)
		if err != nil {
			return err
		}
		if ok && a.State.Holds() {
			holder, inUse = a.Holder(), true
			return nil
		}
		le, ok, err := tx.Lease(vgpu)
		if ok {
			holder, inUse = le.Holder(), true
		}
		return err
	})
	return holder, inUse, err
}
