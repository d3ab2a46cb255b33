package ledger

import (
	"fmt"
	"time"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Lease holds a vGPU for a domain about to migrate in, until Expires. It
// becomes an allocation when the domain starts here, or lapses: readers
// ignore an expired lease and SweepExpired removes it.
type Lease struct {
	VGPU string      `json:"vgpu"`
	GPU  pci.Address `json:"gpu"`
	// Parent is as in Allocation.
	Parent     string    `json:"parent,omitempty"`
	Profile    string    `json:"profile"`
	DomainUUID string    `json:"domainUUID"`
	DomainName string    `json:"domainName"`
	Expires    time.Time `json:"expires"`
}

// Owner is as in Allocation.
func (l Lease) Owner() string { return vgpu.Target{GPU: l.GPU, Parent: l.Parent}.String() }

// Live reports whether the lease still holds at now.
func (l Lease) Live(now time.Time) bool { return now.Before(l.Expires) }

// Holder says who holds the vGPU, for messages.
func (l Lease) Holder() string {
	return fmt.Sprintf("leased to incoming domain %s (%s) until %s",
		l.DomainName, l.DomainUUID, l.Expires.UTC().Format(time.RFC3339))
}

// Lease returns the live lease on vgpu.
func (t *Tx) Lease(vgpu string) (Lease, bool, error) {
	var l Lease
	ok, err := t.get(bucketLeases, vgpu, &l)
	if err != nil || !ok || !l.Live(t.Now()) {
		return Lease{}, false, err
	}
	return l, true, nil
}

// Leases returns the live leases, sorted by vGPU id.
func (t *Tx) Leases() ([]Lease, error) {
	now := t.Now()
	return records(t, bucketLeases, func(l Lease) bool { return l.Live(now) })
}

// PutLease records l, replacing any lease on the same vGPU.
func (t *Tx) PutLease(l Lease) error {
	if l.VGPU == "" || l.DomainUUID == "" || l.Expires.IsZero() {
		return t.wrap("record a lease", fmt.Errorf("incomplete lease %+v (need a vGPU, a domain UUID and an expiry)", l))
	}
	return t.put(bucketLeases, l.VGPU, l)
}

// DeleteLease drops the lease on vgpu, live or not.
func (t *Tx) DeleteLease(vgpu string) error { return t.delete(bucketLeases, vgpu) }

// SweepExpired removes the leases expired at now and returns them.
func (t *Tx) SweepExpired(now time.Time) ([]Lease, error) {
	gone, err := records(t, bucketLeases, func(l Lease) bool { return !l.Live(now) })
	if err != nil {
		return nil, err
	}
	// Deleting while ForEach walks the bucket is not allowed.
	for _, l := range gone {
		if err := t.DeleteLease(l.VGPU); err != nil {
			return nil, err
		}
	}
	return gone, nil
}

// Lease returns the live lease on vgpu.
func (l *Ledger) Lease(vgpu string) (Lease, bool, error) {
	return viewLookup(l, func(tx *Tx) (Lease, bool, error) { return tx.Lease(vgpu) })
}

// Leases returns the live leases.
func (l *Ledger) Leases() ([]Lease, error) {
	return viewValue(l, (*Tx).Leases)
}

// PutLease records a lease.
func (l *Ledger) PutLease(le Lease) error {
	return l.Update(func(tx *Tx) error { return tx.PutLease(le) })
}

// DeleteLease drops the lease on vgpu.
func (l *Ledger) DeleteLease(vgpu string) error {
	return l.Update(func(tx *Tx) error { return tx.DeleteLease(vgpu) })
}

// SweepExpired removes the leases expired at now and returns them.
func (l *Ledger) SweepExpired(now time.Time) ([]Lease, error) {
	return updateValue(l, func(tx *Tx) ([]Lease, error) { return tx.SweepExpired(now) })
}
