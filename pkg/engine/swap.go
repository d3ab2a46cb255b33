package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// An mdev's UUID is its identity in the domain XML, and the kernel cannot
// rename one. So a domain gets its deterministic UUID (domxml.MdevUUID) by
// a swap: a free carved mdev From of the right type is removed and To is
// created with From's type on From's parent. Capacity is unchanged: one
// instance goes, one comes.
//
// Ledger protocol, crash-safe at every step:
//
//  1. one transaction: From is recorded as the domain's (reserved), so no
//     other request can be handed it, and an mdev-swap intent is begun;
//  2. the kernel: remove From, create To;
//  3. one transaction: the allocation moves from From to To, the intent ends.
//
// A crash anywhere leaves the intent open. Repair at start rolls the swap
// forward in the ledger alone: the allocation moves to To (kept as it is if
// To already had one). The kernel side is then finished by reconcile's
// restore step, which gives any allocated mdev that is missing its identity
// back from a free mdev of the GPU, whether To never got created, or From
// was not removed yet (From is simply free again). So the domain keeps what
// it asked for, no vGPU is held twice (the allocation is on one id at a
// time) and none leaks (From is freed in the same transaction).

// swapIntent is the data of an mdev-swap intent. GPU is zero for an mdev
// of a virtual parent (mbochs): Parent then names what it is carved on.
type swapIntent struct {
	DomainUUID string      `json:"domainUUID"`
	DomainName string      `json:"domainName"`
	Profile    string      `json:"profile"`
	GPU        pci.Address `json:"gpu"`
	From       string      `json:"from"`
	To         string      `json:"to"`
	Parent     string      `json:"parent"`
	Type       string      `json:"type"`
}

// swapMdev performs a swap; e.host is held. On a kernel failure it puts
// From back and leaves the ledger as it was before step 1.
func (e *Engine) swapMdev(ctx context.Context, s swapIntent) error {
	start := time.Now()
	var id uint64
	var claimed bool // From's allocation was made by this swap
	err := e.ledger.Update(func(tx *ledger.Tx) error {
		a, ok, err := tx.Allocation(s.From)
		if err != nil {
			return err
		}
		switch {
		case ok && a.DomainUUID != s.DomainUUID:
			return fmt.Errorf("swap mdev %s into %s: %s is %s", s.From, s.To, s.From, a.Holder())
		case !ok:
			if l, ok, err := tx.Lease(s.From); err != nil || ok {
				if err == nil {
					err = fmt.Errorf("swap mdev %s into %s: %s is %s", s.From, s.To, s.From, l.Holder())
				}
				return err
			}
			claimed = true
			if err := tx.PutAllocation(s.reserved(s.From)); err != nil {
				return err
			}
		}
		id, err = tx.BeginIntentData(ledger.IntentMdevSwap, s.GPU, fmt.Sprintf("%s -> %s for %s", s.From, s.To, s.DomainName), s)
		return err
	})
	if err != nil {
		return err
	}
	unlock, err := e.locks.Lock(ctx, s.target())
	if err != nil {
		return errors.Join(err, e.abandonSwap(id, s, claimed))
	}
	kerr := e.swapKernel(ctx, s)
	unlock()
	e.invalidate()
	if kerr != nil {
		observe(e.metrics, opSwap, start, kerr)
		return errors.Join(kerr, e.abandonSwap(id, s, claimed))
	}
	err = e.ledger.Update(func(tx *ledger.Tx) error {
		if err := finishSwap(tx, s); err != nil {
			return err
		}
		return tx.EndIntent(id)
	})
	observe(e.metrics, opSwap, start, err)
	if err == nil {
		e.log.Info("mdev given the domain's identity", "domain", s.DomainName, "domainUUID", s.DomainUUID,
			"from", s.From, "to", s.To, "parent", s.Parent, "type", s.Type)
	}
	return err
}

// target is what the swap's mdevs are on: their GPU, or the virtual mdev
// parent (GPU zero).
func (s swapIntent) target() vgpu.Target {
	if s.GPU.IsZero() {
		return vgpu.Parent(s.Parent)
	}
	return vgpu.GPU(s.GPU)
}

// reserved is the domain's reservation of the swap's mdev id, on the
// swap's target.
func (s swapIntent) reserved(id string) ledger.Allocation {
	t := s.target()
	return ledger.Allocation{VGPU: id, GPU: t.GPU, Parent: t.Parent, Profile: s.Profile,
		DomainUUID: s.DomainUUID, DomainName: s.DomainName, State: ledger.StateReserved}
}

// swapKernel removes From and creates To; on failure carve puts From back.
func (e *Engine) swapKernel(ctx context.Context, s swapIntent) error {
	if _, ok, err := mdev.Get(e.fs, s.To); err != nil || ok {
		return err // To exists already (a repeated swap): nothing to do
	}
	// Removing a From that is gone already does nothing; its undo makes
	// From again all the same.
	ops := []carve.Op{
		{Kind: carve.OpMdevRemove, Parent: s.Parent, Type: s.Type, UUID: s.From},
		{Kind: carve.OpMdevCreate, Parent: s.Parent, Type: s.Type, UUID: s.To},
	}
	if _, err := e.carver.Run(ctx, s.target(), ops); err != nil {
		return fmt.Errorf("give mdev %s the identity %s: %w", s.From, s.To, err)
	}
	return nil
}

// abandonSwap undoes step 1 after a failed kernel step.
func (e *Engine) abandonSwap(id uint64, s swapIntent, claimed bool) error {
	return e.ledger.Update(func(tx *ledger.Tx) error {
		if claimed {
			if _, _, err := tx.DeleteAllocation(s.From); err != nil {
				return err
			}
		}
		return tx.EndIntent(id)
	})
}

// finishSwap moves the domain's allocation from From to To.
func finishSwap(tx *ledger.Tx, s swapIntent) error {
	from, ok, err := tx.Allocation(s.From)
	if err != nil {
		return err
	}
	incoming := ok && from.DomainUUID == s.DomainUUID && from.Incoming
	if ok && from.DomainUUID == s.DomainUUID {
		if _, _, err := tx.DeleteAllocation(s.From); err != nil {
			return err
		}
	}
	to, ok, err := tx.Allocation(s.To)
	if err != nil {
		return err
	}
	if ok {
		if to.DomainUUID != s.DomainUUID {
			return fmt.Errorf("finish the swap of %s into %s: %s is %s", s.From, s.To, s.To, to.Holder())
		}
		return nil
	}
	a := s.reserved(s.To)
	a.Incoming = incoming
	return tx.PutAllocation(a)
}

// repairSwap resolves an mdev-swap intent found open at start.
func (e *Engine) repairSwap(in ledger.Intent) (string, error) {
	var s swapIntent
	if err := json.Unmarshal(in.Data, &s); err != nil {
		return "", fmt.Errorf("repair intent %s: decode its data: %w", in, err)
	}
	err := e.ledger.Update(func(tx *ledger.Tx) error {
		if err := finishSwap(tx, s); err != nil {
			return err
		}
		return tx.EndIntent(in.ID)
	})
	if err != nil {
		return "", fmt.Errorf("repair intent %s: %w", in, err)
	}
	return fmt.Sprintf("%s: rolled forward, %s holds %s; reconcile makes it exist", in, s.DomainName, s.To), nil
}

// restoreIdentities gives every allocated mdev of t that is missing (a
// reboot removed it, or a swap was cut short) its identity back from a free
// mdev of t's profile; e.host is held.
func (e *Engine) restoreIdentities(ctx context.Context, t vgpu.Target, prof string) ([]string, error) {
	var missing []ledger.Allocation
	allocs, err := e.ledger.Allocations()
	if err != nil {
		return nil, err
	}
	for _, a := range allocs {
		if a.Owner() != t.String() || !a.State.Holds() || !isUUID(a.VGPU) {
			continue
		}
		if _, ok, err := mdev.Get(e.fs, a.VGPU); err != nil {
			return nil, err
		} else if !ok {
			missing = append(missing, a)
		}
	}
	var restored []string
	var errs []error
	for _, a := range missing {
		if a.Profile != prof {
			errs = append(errs, fmt.Errorf("allocated mdev %s of domain %s is a %s vGPU, but %s now carries %s: it cannot come back (vgpuctl detach it)",
				a.VGPU, a.DomainName, a.Profile, t.Describe(), prof))
			continue
		}
		// t as it is now: each swap changes which of its mdevs are free.
		typeID, parents, err := e.mdevParents(t, prof)
		if err != nil {
			return restored, fmt.Errorf("restore mdevs of %s: %w", t.Describe(), err)
		}
		from, parent, err := e.freeMdevIn(t.String(), typeID, parents)
		if err == nil {
			err = e.swapMdev(ctx, swapIntent{DomainUUID: a.DomainUUID, DomainName: a.DomainName, Profile: a.Profile,
				GPU: t.GPU, From: from, To: a.VGPU, Parent: parent, Type: typeID})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("restore mdev %s of domain %s: %w", a.VGPU, a.DomainName, err))
			continue
		}
		restored = append(restored, a.VGPU)
	}
	return restored, errors.Join(errs...)
}

// mdevParents reads t as it is now and resolves prof on it: the mdev type
// prof makes there, and t's mdev parents with their types for freeMdevIn (a
// GPU's PF and VFs, or the virtual parent itself).
func (e *Engine) mdevParents(t vgpu.Target, prof string) (typeID string, parents func(add func(string, []inventory.MdevType)), err error) {
	if t.IsParent() {
		p, err := inventory.VirtualMdevParent(e.fs, t.Parent)
		if err != nil {
			return "", nil, err
		}
		pl, err := e.catalog.ResolveParent(prof, p)
		if err != nil {
			return "", nil, err
		}
		return pl.MdevType, func(add func(string, []inventory.MdevType)) { add(p.Name, p.Types) }, nil
	}
	g, err := inventory.Get(e.fs, nil, t.GPU)
	if err != nil {
		return "", nil, err
	}
	pl, err := e.catalog.Resolve(prof, g)
	if err != nil {
		return "", nil, err
	}
	return pl.MdevType, func(add func(string, []inventory.MdevType)) {
		add(g.Address.String(), g.MdevTypes)
		if g.SRIOV != nil {
			for _, vf := range g.SRIOV.VFs {
				add(vf.Address.String(), vf.MdevTypes)
			}
		}
	}, nil
}

// freeMdevIn finds an mdev of typeID among the parents list gives that no
// allocation or lease holds and the config does not pin; on names them in
// messages.
func (e *Engine) freeMdevIn(on, typeID string, list func(add func(string, []inventory.MdevType))) (id, parent string, err error) {
	type inst struct{ id, parent string }
	var all []inst
	add := func(parent string, types []inventory.MdevType) {
		for _, t := range types {
			if t.ID != typeID {
				continue
			}
			for _, u := range t.Instances {
				all = append(all, inst{u, parent})
			}
		}
	}
	list(add)
	pinned := e.pinned() // kept for the domains that name them
	err = e.ledger.View(func(tx *ledger.Tx) error {
		for _, in := range all {
			if pinned[in.id] {
				continue
			}
			if _, ok, err := tx.Allocation(in.id); err != nil || ok {
				if err != nil {
					return err
				}
				continue
			}
			if _, ok, err := tx.Lease(in.id); err != nil || ok {
				if err != nil {
					return err
				}
				continue
			}
			id, parent = in.id, in.parent
			return nil
		}
		return nil
	})
	if err == nil && id == "" {
		err = fmt.Errorf("no free mdev of type %s on %s (its %d are all held)", typeID, on, len(all))
	}
	return id, parent, err
}
