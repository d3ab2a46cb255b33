package ledger

import "sync"

// commitHooks are the functions called after each committed write.
type commitHooks struct {
	mu   sync.Mutex
	next int
	fns  map[int]func()
}

// OnCommit calls fn after every write transaction this Ledger commits, in
// the committing goroutine: fn must be quick and must not write the
// ledger (a non-blocking send on a channel is the use it is made for).
// Writes by other processes (vgpuctl with no vgpud running) are not seen.
// The returned func removes fn.
func (l *Ledger) OnCommit(fn func()) (remove func()) {
	h := &l.hooks
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fns == nil {
		h.fns = map[int]func(){}
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

func (h *commitHooks) run() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, fn := range h.fns {
		fn()
	}
}
