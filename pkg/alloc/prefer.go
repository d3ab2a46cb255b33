package alloc

import (
	"cmp"
	"context"
	"slices"

	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// Prefer chooses size vGPUs of profile from available (ids the caller may
// hand out, such as the devices the kubelet has free) by the allocator's
// rules, and writes nothing: the ids of must first, then free ones from
// the least-loaded GPUs, all on one NUMA node when the request fits on
// one (must's node first, then the node with the most free vGPUs), else
// across nodes. Fewer than size are returned when fewer are free; the
// caller decides (the kubelet takes the rest itself).
func (a *Allocator) Prefer(ctx context.Context, profile string, host []Candidate, available, must []string, size int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	offered := map[string]bool{}
	for _, id := range available {
		if c, err := VGPUID(id); err == nil {
			offered[c] = true
		}
	}
	picked := []string{}
	var mustNodes []int
	err := a.ledger.View(func(tx *ledger.Tx) error {
		p, err := newPool(tx, Request{Profile: profile}, host)
		if err != nil {
			return err
		}
		byID := map[string]Candidate{}
		for _, c := range p.vgpus {
			byID[c.ID] = c
		}
		for _, id := range must {
			c, err := VGPUID(id)
			if err != nil || slices.Contains(picked, c) {
				continue
			}
			picked = append(picked, c)
			if v, ok := byID[c]; ok {
				p.load[p.gpu[c]]++ // as if given: the rest spreads around it
				mustNodes = append(mustNodes, v.NUMANode)
			}
		}
		need := size - len(picked)
		if need <= 0 {
			return nil
		}
		// Only the offered, free vGPUs not already picked are choosable.
		p.vgpus = slices.DeleteFunc(p.vgpus, func(c Candidate) bool {
			return !offered[c.ID] || slices.Contains(picked, c.ID) || !p.free(c)
		})
		for _, n := range preferredNodes(p.vgpus, mustNodes) {
			p.req.NUMANode = &n
			if got, err := p.choose(need, 0); err == nil {
				picked = append(picked, candidateIDs(got)...)
				return nil
			}
		}
		p.req.NUMANode = nil
		got, err := p.choose(min(need, len(p.vgpus)), 0)
		if err != nil {
			return err
		}
		picked = append(picked, candidateIDs(got)...)
		return nil
	})
	return picked, err
}

// preferredNodes orders the NUMA nodes to try: those of must (in order),
// then the others by their number of vGPUs in free, most first. Unknown
// nodes (-1) are not tried: a request restricted to them is no placement.
func preferredNodes(free []Candidate, must []int) []int {
	count := map[int]int{}
	for _, c := range free {
		if c.NUMANode >= 0 {
			count[c.NUMANode]++
		}
	}
	var out []int
	for _, n := range must {
		if n >= 0 && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	var rest []int
	for n := range count {
		if !slices.Contains(out, n) {
			rest = append(rest, n)
		}
	}
	slices.SortFunc(rest, func(x, y int) int {
		return cmp.Or(cmp.Compare(count[y], count[x]), cmp.Compare(x, y))
	})
	return append(out, rest...)
}

func candidateIDs(cs []Candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}
