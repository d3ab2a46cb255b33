package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// DomainSource says which domains the hypervisor knows. vgpud's comes from
// libvirt (virt.Monitor); without one, vgpud never frees a vGPU on its own.
type DomainSource interface {
	// Domains returns every domain libvirt knows, defined or running, by
	// lower-case UUID, with whether it runs. An error means "unknown":
	// nothing is concluded from it.
	Domains(ctx context.Context) (map[string]bool, error)
}

// Defaults of the collection of vGPUs held for domains that are gone.
const (
	DefaultCollectEvery = time.Minute
	// DefaultCollectGrace: a domain must stay unknown to libvirt this long
	// before its vGPUs go (an undefine and define to edit a domain keeps
	// them).
	DefaultCollectGrace = 30 * time.Second
)

// CollectReport is what one collection did.
type CollectReport struct {
	// Expired: leases that lapsed and were removed.
	Expired []ledger.Lease
	// Freed: allocations of domains libvirt no longer knows.
	Freed []ledger.Allocation
	// Dropped: leases of such domains.
	Dropped []ledger.Lease
	// Waiting: domains gone for less than the grace period.
	Waiting []string
	// Next: when the first of the Waiting domains' grace periods ends
	// (zero when none waits).
	Next time.Time
}

// Collect sweeps expired leases and frees what the ledger holds for
// domains libvirt does not know (known, from a DomainSource; nil: unknown,
// nothing is freed) once they have been gone for grace. A vGPU a VFIO user
// still holds is never freed: its domain is not really gone (libvirt lost
// track of a QEMU); it is logged and kept. A vGPU migrating out is left to
// its migration while the domain runs here, and freed once it does not.
func (e *Engine) Collect(ctx context.Context, known map[string]bool, now time.Time, grace time.Duration) (CollectReport, error) {
	var rep CollectReport
	expired, err := e.ledger.SweepExpired(now)
	if err != nil {
		return rep, err
	}
	rep.Expired = expired
	for _, l := range expired {
		e.log.Info("lease expired: vGPU free again", "vgpu", l.VGPU, "domain", l.DomainName, "domainUUID", l.DomainUUID)
	}
	if known == nil {
		return rep, nil
	}
	holders := map[string]string{} // domain UUID -> name
	migrating := map[string]bool{} // domain UUID -> some of its vGPUs migrate out
	incoming := map[string]bool{}  // domain UUID -> it migrated in
	err = e.ledger.View(func(tx *ledger.Tx) error {
		as, err := tx.Allocations()
		if err != nil {
			return err
		}
		for _, a := range as {
			if a.Pod != nil {
				continue // the kubelet's: pkg/deviceplugin frees it when its pod is gone
			}
			holders[a.DomainUUID] = a.DomainName
			migrating[a.DomainUUID] = migrating[a.DomainUUID] || a.State == ledger.StateMigrating
			incoming[a.DomainUUID] = incoming[a.DomainUUID] || a.Incoming
		}
		ls, err := tx.Leases()
		for _, l := range ls {
			holders[l.DomainUUID] = l.DomainName
		}
		return err
	})
	if err != nil {
		return rep, err
	}
	e.goneMu.Lock()
	defer e.goneMu.Unlock()
	for u := range e.gone {
		_, held := holders[u]
		if _, there := known[u]; there || !held {
			delete(e.gone, u)
		}
	}
	var errs []error
	for _, u := range slices.Sorted(maps.Keys(holders)) {
		running, there := known[u]
		// A domain migrating out is its migration's while it runs here;
		// once it does not, it left (vgpuctl migrate died before freeing).
		if there && (!migrating[u] || running) {
			continue
		}
		since, ok := e.gone[u]
		if !ok {
			e.gone[u] = now
			since = now
			e.log.Info("domain gone from libvirt; its vGPUs go after the grace period", "domain", holders[u], "domainUUID", u, "grace", grace)
		}
		// A domain that came in by migration and vanished: its incoming
		// migration failed. Its vGPUs go at once.
		if end := since.Add(grace); now.Before(end) && !incoming[u] {
			rep.Waiting = append(rep.Waiting, u)
			if rep.Next.IsZero() || end.Before(rep.Next) {
				rep.Next = end
			}
			continue
		}
		var h api.Holdings
		var err error
		if migrating[u] {
			h, err = e.Migration(ctx, u, api.MigrationCommit)
		} else {
			h, err = e.Unreserve(ctx, u, "")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("free the vGPUs of domain %s (%s), gone from libvirt: %w", holders[u], u, err))
			continue
		}
		delete(e.gone, u)
		if incoming[u] {
			if err := e.recreateMdevs(ctx, h.Allocations); err != nil {
				errs = append(errs, fmt.Errorf("recreate the mdevs of domain %s (%s), whose incoming migration failed: %w", holders[u], u, err))
			}
		}
		for _, a := range h.Allocations {
			rep.Freed = append(rep.Freed, ledger.Allocation{VGPU: a.VGPU, Profile: a.Profile, DomainUUID: a.DomainUUID,
				DomainName: a.DomainName, State: ledger.State(a.State)})
			e.log.Info("freed vGPU of a domain gone from libvirt", "vgpu", a.VGPU, "domain", a.DomainName, "domainUUID", u, "was", a.State)
		}
		for _, l := range h.Leases {
			rep.Dropped = append(rep.Dropped, ledger.Lease{VGPU: l.VGPU, Profile: l.Profile, DomainUUID: l.DomainUUID, DomainName: l.DomainName})
			e.log.Info("dropped lease of a domain gone from libvirt", "vgpu", l.VGPU, "domain", l.DomainName, "domainUUID", u)
		}
	}
	return rep, errors.Join(errs...)
}

// recreateMdevs removes the freed mdevs an incoming migration touched and
// reconciles their GPUs, which carve them anew: a device left mid-resume
// by a failed migration must not be handed to the next VM (the kernel's
// mtty stays RESUMING and oopses at the next open; docs/migration.md).
func (e *Engine) recreateMdevs(ctx context.Context, freed []api.Allocation) error {
	e.host.Lock()
	defer e.host.Unlock()
	defer e.invalidate()
	gpus := map[string]bool{}
	var errs []error
	for _, a := range freed {
		if !isUUID(a.VGPU) {
			continue
		}
		if err := e.removeMdev(ctx, a.VGPU); err != nil {
			errs = append(errs, err)
			continue
		}
		gpus[a.GPU] = true
		e.log.Info("removed the mdev of a failed incoming migration", "mdev", a.VGPU, "domain", a.DomainName)
	}
	if len(gpus) > 0 {
		rep := e.reconcileLocked(ctx, e.Config(), ReasonRelease, gpus)
		if rep.Error != "" {
			errs = append(errs, errors.New(rep.Error))
		}
	}
	return errors.Join(errs...)
}

// Free frees everything the ledger holds for a domain: vgpuctl release,
// for a domain that is gone or whose vGPUs an admin takes back. It refuses
// while the domain runs (libvirt says so, or a VFIO user holds one of its
// vGPUs) unless force. It changes only the ledger: no device is destroyed.
func (e *Engine) Free(ctx context.Context, domainUUID string, force bool) (api.Holdings, error) {
	canon, err := alloc.DomainUUID(domainUUID)
	if err != nil {
		return api.Holdings{}, err
	}
	if !force && e.domains != nil {
		known, err := e.domains.Domains(ctx)
		if err == nil && known[canon] {
			return api.Holdings{}, fmt.Errorf("%w: domain %s runs (libvirt says so); stop it first, or force",
				alloc.ErrAttached, canon)
		}
	}
	if !force {
		return e.Unreserve(ctx, canon, "")
	}
	e.host.RLock()
	defer e.host.RUnlock()
	h, err := e.freeAll(ctx, canon)
	if err == nil && len(h.Allocations)+len(h.Leases) > 0 {
		e.log.Warn("forced release", "domainUUID", canon, "vgpus", len(h.Allocations), "leases", len(h.Leases))
	}
	return h, err
}

// freeAll deletes every allocation and lease of the domain (ledger only);
// the caller holds the host lock shared.
func (e *Engine) freeAll(ctx context.Context, canon string) (api.Holdings, error) {
	as, err := e.alloc.ReleaseDomain(ctx, canon)
	if err != nil {
		return api.Holdings{}, err
	}
	ls, err := e.alloc.DropLeases(ctx, canon)
	if err != nil {
		return api.Holdings{}, err
	}
	return api.Holdings{Allocations: apiAllocations(nil, as), Leases: apiLeases(nil, ls)}, nil
}

// collectSettle is how long the collection waits after a domain event
// before it looks: events come in bursts (stopped, then undefined), and one
// look covers a burst. It is also how late after its undefine a domain's
// grace period may start, so it stays well under a second.
const collectSettle = 200 * time.Millisecond

// RunCollect runs Collect every interval, collectSettle after a domain
// event (events: the domain source's), and when a gone domain's grace
// period ends, while ctx lives. It keeps one deadline, the earliest of
// those: an event never postpones a look already due sooner, so a steady
// stream of events delays no domain's freeing.
func (e *Engine) RunCollect(ctx context.Context, events <-chan struct{}, every, grace time.Duration) {
	src := e.domains
	if every <= 0 {
		every = DefaultCollectEvery
	}
	if grace <= 0 {
		grace = DefaultCollectGrace
	}
	if src == nil {
		events = nil
	}
	due := time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
			if at := time.Now().Add(collectSettle); at.Before(due) {
				due = at
				t.Reset(collectSettle)
			}
			continue
		case <-t.C:
		}
		known := map[string]bool(nil)
		if src != nil {
			k, err := src.Domains(ctx)
			if err != nil {
				e.log.Debug("cannot list libvirt's domains; collecting only expired leases", "err", err)
			} else {
				known = k
			}
		}
		now := time.Now()
		rep, err := e.Collect(ctx, known, now, grace)
		if err != nil {
			e.log.Warn("collect vGPUs of gone domains", "err", err)
		}
		due = now.Add(every)
		if !rep.Next.IsZero() && rep.Next.Before(due) {
			due = rep.Next
		}
		t.Reset(time.Until(due))
	}
}
