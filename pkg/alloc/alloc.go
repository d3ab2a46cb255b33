package alloc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/vgpu-project/vgpu/internal/change"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Candidate is one of the host's vGPUs with its GPU's NUMA node.
type Candidate struct {
	vgpu.VGPU
	NUMANode int `json:"numaNode"` // -1 when unknown
}

// Candidates joins the vGPUs carve.VGPUs lists with their GPUs' NUMA
// nodes. A vGPU whose GPU is not in gpus gets node -1.
func Candidates(vgpus []vgpu.VGPU, gpus []inventory.GPU) []Candidate {
	numa := make(map[string]int, len(gpus))
	for _, g := range gpus {
		numa[g.Address.String()] = g.NUMANode
	}
	out := make([]Candidate, len(vgpus))
	for i, v := range vgpus {
		n, ok := numa[v.GPU]
		if !ok {
			n = -1
		}
		out[i] = Candidate{VGPU: v, NUMANode: n}
	}
	return out
}

// Allocator hands out vGPUs recorded in one ledger. It keeps no state of
// its own: the ledger is the truth, so any number of Allocators (and
// goroutines) may share one ledger.
type Allocator struct {
	ledger  *ledger.Ledger
	catalog *profile.Catalog
}

// New returns an Allocator over l; profile names are checked against cat.
func New(l *ledger.Ledger, cat *profile.Catalog) *Allocator {
	return &Allocator{ledger: l, catalog: cat}
}

// Allocate gives the domain req.Count vGPUs of req.Profile from host (the
// host's vGPUs as the caller sees them now), reserved in the ledger.
//
// It is idempotent: what the domain already holds of the profile counts
// towards req.Count, so asking again returns the same vGPUs, and a larger
// count tops them up. A live lease of the domain (an incoming migration)
// becomes an allocation before any other vGPU is chosen. The result is
// sorted by vGPU id.
func (a *Allocator) Allocate(ctx context.Context, req Request, host []Candidate) ([]ledger.Allocation, error) {
	out, _, err := a.Grant(ctx, req, host)
	return out, err
}

// Grant is Allocate that also says which allocations it made (granted),
// as against those the domain held already: what Revoke takes back.
func (a *Allocator) Grant(ctx context.Context, req Request, host []Candidate) (out, granted []ledger.Allocation, err error) {
	err = a.reserve(ctx, &req, host, func(tx *ledger.Tx, p *pool) error {
		held := p.held()
		if len(held) > req.Count {
			return refuse(ErrConflict, "domain %s (%s) already holds %d x %s, more than the %d asked; release it first",
				req.DomainName, req.DomainUUID, len(held), req.Profile, req.Count)
		}
		leased := p.leased()
		leased = leased[:min(len(leased), req.Count-len(held))]
		picked, err := p.choose(req.Count-len(held)-len(leased), len(held)+len(leased))
		if err != nil {
			return err
		}
		for _, h := range held {
			h, err := p.keep(tx, h)
			if err != nil {
				return err
			}
			out = append(out, h)
		}
		for _, c := range append(leased, picked...) {
			al, err := p.grant(tx, c.ID)
			if err != nil {
				return err
			}
			out, granted = append(out, al), append(granted, al)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	slices.SortFunc(out, func(x, y ledger.Allocation) int { return cmp.Compare(x.VGPU, y.VGPU) })
	return out, granted, nil
}

// Lease holds req.Count vGPUs of req.Profile for a domain about to migrate
// in, until now+ttl. Idempotent like Allocate: the domain's live leases
// count towards req.Count and get the new expiry. A domain that already
// holds allocations here is refused (ErrConflict): it is not arriving.
func (a *Allocator) Lease(ctx context.Context, req Request, host []Candidate, ttl time.Duration) ([]ledger.Lease, error) {
	return a.lease(ctx, req, host, ttl, false)
}

// WouldLease answers as Lease would, with the vGPUs it would choose, and
// writes nothing: a migration's --dry-run asking the destination.
func (a *Allocator) WouldLease(ctx context.Context, req Request, host []Candidate, ttl time.Duration) ([]ledger.Lease, error) {
	return a.lease(ctx, req, host, ttl, true)
}

// errDryRun rolls back the transaction of a dry run.
var errDryRun = errors.New("dry run: nothing written")

func (a *Allocator) lease(ctx context.Context, req Request, host []Candidate, ttl time.Duration, dry bool) ([]ledger.Lease, error) {
	if ttl <= 0 {
		return nil, refuse(ErrInvalid, "lease time %s is not positive", ttl)
	}
	var out []ledger.Lease
	err := a.reserve(ctx, &req, host, func(tx *ledger.Tx, p *pool) error {
		if held := p.held(); len(held) > 0 {
			return refuse(ErrConflict, "domain %s (%s) already holds %d x %s on this host; a lease is for a domain arriving",
				req.DomainName, req.DomainUUID, len(held), req.Profile)
		}
		leased := p.leased()
		if len(leased) > req.Count {
			return refuse(ErrConflict, "domain %s (%s) already leases %d x %s, more than the %d asked; drop its leases first",
				req.DomainName, req.DomainUUID, len(leased), req.Profile, req.Count)
		}
		picked, err := p.choose(req.Count-len(leased), len(leased))
		if err != nil {
			return err
		}
		expires := tx.Now().Add(ttl)
		for _, c := range append(leased, picked...) {
			g, parent, err := p.owner(c.ID)
			if err != nil {
				return err
			}
			le := ledger.Lease{VGPU: c.ID, GPU: g, Parent: parent, Profile: req.Profile,
				DomainUUID: req.DomainUUID, DomainName: req.DomainName, Expires: expires}
			if err := tx.PutLease(le); err != nil {
				return err
			}
			out = append(out, le)
		}
		if dry {
			return errDryRun
		}
		return nil
	})
	if err != nil && !(dry && errors.Is(err, errDryRun)) {
		return nil, err
	}
	slices.SortFunc(out, func(x, y ledger.Lease) int { return cmp.Compare(x.VGPU, y.VGPU) })
	return out, nil
}

// reserve validates *req (leaving its UUID canonical) and runs fn on the
// pool of its profile in one write transaction: the read that chooses and
// the write that records the choice cannot interleave with another's.
func (a *Allocator) reserve(ctx context.Context, req *Request, host []Candidate, fn func(*ledger.Tx, *pool) error) error {
	r, err := a.check(ctx, *req, host)
	if err != nil {
		return err
	}
	*req = r
	return a.ledger.Update(func(tx *ledger.Tx) error {
		// Inside the transaction: a caller who hung up while it waited
		// for the ledger gets nothing.
		if err := change.Begin(ctx); err != nil {
			return err
		}
		p, err := newPool(tx, r, host)
		if err != nil {
			return err
		}
		return fn(tx, p)
	})
}

// check validates req against the catalog.
func (a *Allocator) check(ctx context.Context, req Request, host []Candidate) (Request, error) {
	if err := ctx.Err(); err != nil {
		return req, err
	}
	req, err := req.check()
	if err != nil {
		return req, err
	}
	if _, ok := a.catalog.Get(req.Profile); !ok {
		var here []string
		for _, c := range host {
			if c.Profile != "" && !slices.Contains(here, c.Profile) {
				here = append(here, c.Profile)
			}
		}
		slices.Sort(here)
		known := "none: no GPU here is carved (vgpuctl apply)"
		if len(here) > 0 {
			known = strings.Join(here, ", ")
		}
		return req, refuse(ErrUnknownProfile, "unknown profile %q; profiles on this host: %s", req.Profile, known)
	}
	return req, nil
}

// pool is the host's vGPUs of the requested profile with the ledger's
// view of them, read inside the transaction that writes the choice.
type pool struct {
	req   Request
	vgpus []Candidate                  // of req.Profile, sorted by id
	gpu   map[string]string            // vGPU id -> its GPU's address or virtual parent's name
	alloc map[string]ledger.Allocation // every allocation, by vGPU
	lease map[string]ledger.Lease      // every live lease, by vGPU
	load  map[string]int               // allocations and live leases per GPU or parent
}

// owner splits a vGPU's GPU field by the ledger's rule (ledger.ParseOwner):
// a PCI address, or the name of a virtual mdev parent, which only an mdev
// on that parent (carve.ParentVGPUs) gives.
func owner(c Candidate) (pci.Address, string, error) {
	g, parent, err := ledger.ParseOwner(c.GPU)
	if err == nil && parent != "" && (c.Kind != vgpu.KindMdev || c.Parent != parent) {
		return pci.Address{}, "", fmt.Errorf("%q names a virtual mdev parent, but the vGPU is of kind %s on parent %q, not an mdev on it", parent, c.Kind, c.Parent)
	}
	return g, parent, err
}

func newPool(tx *ledger.Tx, req Request, host []Candidate) (*pool, error) {
	p := &pool{req: req, gpu: map[string]string{}, alloc: map[string]ledger.Allocation{},
		lease: map[string]ledger.Lease{}, load: map[string]int{}}
	for _, c := range host {
		if c.Profile != req.Profile {
			continue
		}
		if _, _, err := owner(c); err != nil {
			return nil, fmt.Errorf("allocate %s: vGPU %s names its GPU %q: %w", req.Profile, c.ID, c.GPU, err)
		}
		p.gpu[c.ID] = c.GPU
		p.vgpus = append(p.vgpus, c)
	}
	slices.SortFunc(p.vgpus, func(x, y Candidate) int { return cmp.Compare(x.ID, y.ID) })
	allocs, err := tx.Allocations()
	if err != nil {
		return nil, err
	}
	for _, al := range allocs {
		p.alloc[al.VGPU] = al
		p.load[al.Owner()]++
	}
	leases, err := tx.Leases()
	if err != nil {
		return nil, err
	}
	for _, le := range leases {
		p.lease[le.VGPU] = le
		p.load[le.Owner()]++
	}
	return p, nil
}

// keep returns the domain's allocation h, renamed when the domain was.
func (p *pool) keep(tx *ledger.Tx, h ledger.Allocation) (ledger.Allocation, error) {
	if h.DomainName == p.req.DomainName {
		return h, nil
	}
	h.DomainName = p.req.DomainName
	return h, tx.PutAllocation(h)
}

// grant records vGPU id as reserved for the domain.
func (p *pool) grant(tx *ledger.Tx, id string) (ledger.Allocation, error) {
	g, parent, err := p.owner(id)
	if err != nil {
		return ledger.Allocation{}, err
	}
	al := ledger.Allocation{VGPU: id, GPU: g, Parent: parent, Profile: p.req.Profile,
		DomainUUID: p.req.DomainUUID, DomainName: p.req.DomainName, State: ledger.StateReserved, Since: tx.Now()}
	if p.req.Pod != nil {
		pod := *p.req.Pod
		al.Pod = &pod
	}
	// A lease of this domain's becomes its allocation: it came in by
	// migration. Any lease (an expired one left unswept) goes.
	if l, ok, err := tx.Lease(id); err != nil {
		return al, err
	} else if ok && l.DomainUUID == p.req.DomainUUID {
		al.Incoming = true
	}
	if err := tx.DeleteLease(id); err != nil {
		return al, err
	}
	return al, tx.PutAllocation(al)
}

// owner is vGPU id's GPU address or virtual parent name, for the ledger
// (newPool has checked it).
func (p *pool) owner(id string) (pci.Address, string, error) { return ledger.ParseOwner(p.gpu[id]) }

// held is what the domain holds of the profile. Allocations being
// released are not held: they are on their way out, so a domain starting
// again gets others rather than one the release may be destroying.
func (p *pool) held() []ledger.Allocation {
	var out []ledger.Allocation
	for _, al := range p.alloc {
		if al.DomainUUID == p.req.DomainUUID && al.Profile == p.req.Profile && al.State.Holds() {
			out = append(out, al)
		}
	}
	slices.SortFunc(out, func(x, y ledger.Allocation) int { return cmp.Compare(x.VGPU, y.VGPU) })
	return out
}

// leased is the host's vGPUs of the profile leased to the domain. Their
// InUse is ignored: the lease itself may be what made it true.
func (p *pool) leased() []Candidate {
	var out []Candidate
	for _, c := range p.vgpus {
		_, allocated := p.alloc[c.ID]
		if le, ok := p.lease[c.ID]; ok && le.DomainUUID == p.req.DomainUUID && !allocated {
			out = append(out, c)
		}
	}
	return out
}

func (p *pool) free(c Candidate) bool {
	_, allocated := p.alloc[c.ID]
	_, leased := p.lease[c.ID]
	return !allocated && !leased && !c.InUse && p.local(c)
}

func (p *pool) local(c Candidate) bool { return p.req.NUMANode == nil || *p.req.NUMANode == c.NUMANode }

// choose picks need free vGPUs one at a time from the least-loaded GPU,
// counting each pick, so a request for several spreads over GPUs. has is
// what the domain already has towards the request, for the message.
func (p *pool) choose(need, has int) ([]Candidate, error) {
	var free []Candidate
	for _, c := range p.vgpus {
		if p.free(c) {
			free = append(free, c)
		}
	}
	if len(free) < need {
		return nil, p.short(need, has, len(free))
	}
	load := maps.Clone(p.load)
	picked := make([]Candidate, 0, need)
	for range need {
		best := 0
		for i, c := range free {
			// free is sorted by id: a strict < keeps the lowest id on a tie.
			if load[p.gpu[c.ID]] < load[p.gpu[free[best].ID]] {
				best = i
			}
		}
		picked = append(picked, free[best])
		load[p.gpu[free[best].ID]]++
		free = slices.Delete(free, best, best+1)
	}
	return picked, nil
}

// short explains ErrNoCapacity GPU by GPU:
//
//	need 2 x mi25-4g, 1 free on this host (0000:03:00.0: 3 of 4 allocated)
func (p *pool) short(need, has, free int) error {
	r := p.req
	ask := fmt.Sprintf("need %d x %s", need, r.Profile)
	if has > 0 {
		ask += fmt.Sprintf(" besides the %d domain %s has", has, r.DomainName)
	}
	if len(p.vgpus) == 0 {
		return refuse(ErrNoCapacity, "%s, but no GPU on this host carries %s (is it in the host config? vgpuctl apply)", ask, r.Profile)
	}
	type use struct{ total, allocated, leased, busy, numa int }
	uses := map[string]*use{}
	var gpus []string
	for _, c := range p.vgpus {
		g := p.gpu[c.ID]
		u := uses[g]
		if u == nil {
			u = &use{numa: c.NUMANode}
			uses[g] = u
			gpus = append(gpus, g)
		}
		u.total++
		_, allocated := p.alloc[c.ID]
		_, leased := p.lease[c.ID]
		switch {
		case allocated:
			u.allocated++
		case leased:
			u.leased++
		case c.InUse:
			u.busy++
		}
	}
	slices.Sort(gpus)
	parts := make([]string, len(gpus))
	for i, g := range gpus {
		u := uses[g]
		s := fmt.Sprintf("%s: %d of %d allocated", g, u.allocated, u.total)
		if u.leased > 0 {
			s += fmt.Sprintf(", %d leased", u.leased)
		}
		if u.busy > 0 {
			s += fmt.Sprintf(", %d in use outside vgpud", u.busy)
		}
		if r.NUMANode != nil {
			s += fmt.Sprintf(", NUMA node %d", u.numa)
		}
		parts[i] = s
	}
	return refuse(ErrNoCapacity, "%s, %d free %s (%s)", ask, free, r.where(), strings.Join(parts, "; "))
}
