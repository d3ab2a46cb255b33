package engine

import "sync"

// changeFeed tells subscribers that the host or the ledger changed: a
// kernel change made by the engine (every one drops the view), a ledger
// commit (a vGPU reserved, claimed, freed), or a kernel event from outside
// (HostChanged). Each subscriber has a channel of one: a burst of changes
// is one wake-up, and a slow subscriber never blocks a change.
type changeFeed struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

func (f *changeFeed) notify() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.subs {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is pending: it covers this change
		}
	}
}

// Changes subscribes to the engine's changes: the channel receives a value
// after vGPUs were carved, uncarved, claimed, freed or made ready, or the
// host changed outside vgpud (HostChanged), coalescing bursts; the
// subscriber then reads the state it wants. cancel ends the subscription.
func (e *Engine) Changes() (ch <-chan struct{}, cancel func()) {
	c := make(chan struct{}, 1)
	f := &e.feed
	f.mu.Lock()
	if f.subs == nil {
		f.subs = map[chan struct{}]struct{}{}
	}
	f.subs[c] = struct{}{}
	f.mu.Unlock()
	return c, func() {
		f.mu.Lock()
		delete(f.subs, c)
		f.mu.Unlock()
	}
}

// HostChanged says the kernel changed outside vgpud (a device added to or
// removed from the bus, a driver bound): the view is read again and the
// subscribers of Changes are told.
func (e *Engine) HostChanged() { e.invalidate() }
