package engine

import (
	"sync"

	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// changeFeed tells subscribers that the host or the ledger changed: a
// kernel change made by the engine (every one drops the view), a ledger
// commit (a vGPU reserved, claimed, freed), or a kernel event from outside
// (HostChanged). Each subscriber has a channel of one and a pending
// Change: a burst of changes is one wake-up and one Change, and a slow
// subscriber never blocks a change.
type changeFeed struct {
	mu   sync.Mutex
	subs map[*Subscription]struct{}
}

// Change is what changed since a subscriber last took its changes: the
// vGPUs whose holder (allocation, lease) changed, or All when the feed
// cannot say (a carve, an uncarve, a kernel change, a device gone from the
// bus): then anything may have.
type Change struct {
	VGPUs []string
	All   bool
}

// Subscription is one subscriber of Changes.
type Subscription struct {
	c       chan struct{}
	mu      sync.Mutex
	pending map[string]struct{}
	all     bool
	cancel  func()
}

// C receives a value when a Change is pending.
func (s *Subscription) C() <-chan struct{} { return s.c }

// Take returns what changed since the last Take and clears it. Read the
// state after Take: a change after it wakes C again.
func (s *Subscription) Take() Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Change{All: s.all}
	if !s.all {
		c.VGPUs = make([]string, 0, len(s.pending))
		for id := range s.pending {
			c.VGPUs = append(c.VGPUs, id)
		}
	}
	clear(s.pending)
	s.all = false
	return c
}

// Cancel ends the subscription.
func (s *Subscription) Cancel() { s.cancel() }

func (s *Subscription) add(vgpus []string, all bool) {
	s.mu.Lock()
	if all {
		s.all = true
		clear(s.pending)
	} else if !s.all {
		for _, id := range vgpus {
			s.pending[id] = struct{}{}
		}
	}
	s.mu.Unlock()
	select {
	case s.c <- struct{}{}:
	default: // a wake-up is pending: it covers this change
	}
}

// notify tells every subscriber that anything may have changed.
func (f *changeFeed) notify() { f.notifyOf(nil, true) }

// committed tells the subscribers what a ledger commit wrote.
func (f *changeFeed) committed(c ledger.Commit) { f.notifyOf(c.VGPUs, c.Other) }

func (f *changeFeed) notifyOf(vgpus []string, all bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		s.add(vgpus, all)
	}
}

// Changes subscribes to the engine's changes: C receives a value after
// vGPUs were carved, uncarved, claimed, freed or made ready, or the host
// changed outside vgpud (HostChanged), coalescing bursts; Take says which
// vGPUs changed (or that any may have), and the subscriber then reads the
// state it wants. The first Take says All.
func (e *Engine) Changes() *Subscription {
	s := &Subscription{c: make(chan struct{}, 1), pending: map[string]struct{}{}, all: true}
	f := &e.feed
	f.mu.Lock()
	if f.subs == nil {
		f.subs = map[*Subscription]struct{}{}
	}
	f.subs[s] = struct{}{}
	f.mu.Unlock()
	s.cancel = func() {
		f.mu.Lock()
		delete(f.subs, s)
		f.mu.Unlock()
	}
	return s
}

// HostChanged says the kernel changed outside vgpud (a device added to or
// removed from the bus, a driver bound): the view is read again and the
// subscribers of Changes are told.
func (e *Engine) HostChanged() { e.invalidate() }
