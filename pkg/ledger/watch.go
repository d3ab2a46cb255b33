package ledger

import (
	"slices"
	"sync"
)

// commitHooks are the functions called after each committed write.
type commitHooks struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(Commit)
}

// Commit is what one committed write transaction wrote, as far as who
// holds which vGPU goes: the vGPUs whose allocation or lease it put or
// deleted. Other is set when it wrote anything else that is not an
// intent (a carved GPU, a driver record): then any vGPU may have changed.
type Commit struct {
	VGPUs []string
	Other bool
}

func (c *Commit) wrote(bucket, key string) {
	switch bucket {
	case bucketAllocations, bucketLeases:
		if !slices.Contains(c.VGPUs, key) {
			c.VGPUs = append(c.VGPUs, key)
		}
	case bucketIntents: // an intent changes no holder
	default:
		c.Other = true
	}
}

// OnCommit calls fn with what it wrote after every write transaction this
// Ledger commits, in the committing goroutine: fn must be quick and must
// not write the ledger (a non-blocking send on a channel is the use it is made for).
// Writes by other processes (vgpuctl with no vgpud running) are not seen.
// The returned func removes fn.
func (l *Ledger) OnCommit(fn func(Commit)) (remove func()) {
	h := &l.hooks
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fns == nil {
		h.fns = map[int]func(Commit){}
	}
	id := h.next
	h.next++
	h.fns[id] = fn
	return func() {
		h.mu.Lock()
		delete(h.fns, id)
		h.mu.Unlock()
	}
}

func (h *commitHooks) run(c Commit) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, fn := range h.fns {
		fn(c)
	}
}
