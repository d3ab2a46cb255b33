package fusefs

import (
	"sort"
	"sync"
	"syscall"
)

// Hold makes the Nth write to Path (1-based, counted from when it is
// armed; 0 means 1), or with Always the Nth and every later one, wait
// before it reaches the kernel until it is released. Paths compare after
// resolving symlinks, as the kernel's faults do.
//
// A held write ignores signals, as a kernel store that blocks does: a
// process killed while held stays in the kernel until the write is
// released, and then goes away. This lets a test stop a process in the
// middle of a multi-step change, kill it, and choose whether that step
// happened (release with errno 0) or not (release with an errno).
type Hold struct {
	Path   string `json:"path"`
	Nth    int    `json:"nth,omitempty"`
	Always bool   `json:"always,omitempty"`
}

// HoldState is an armed hold as Holds.List reports it.
type HoldState struct {
	ID int `json:"id"`
	Hold
	// Seen counts the writes that matched so far.
	Seen int `json:"seen"`
	// Waiting counts the writes held now.
	Waiting int `json:"waiting"`
}

// Holds are the armed holds of one mount. Safe for concurrent use.
type Holds struct {
	canonical func(string) string

	mu    sync.Mutex
	next  int
	armed map[int]*hold
}

type hold struct {
	HoldState
	release chan struct{} // closed on release
	errno   syscall.Errno // the released writes' result; set before close
}

func newHolds(canonical func(string) string) *Holds {
	return &Holds{canonical: canonical, armed: map[int]*hold{}}
}

// Add arms h and returns its id.
func (hs *Holds) Add(h Hold) int {
	if h.Nth < 1 {
		h.Nth = 1
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.next++
	hs.armed[hs.next] = &hold{
		HoldState: HoldState{ID: hs.next, Hold: h},
		release:   make(chan struct{}),
	}
	return hs.next
}

// Release disarms the holds on path (every hold when path is "") and lets
// the writes they hold go on: to the kernel when errno is 0, or failing
// with errno without reaching it. It returns how many writes it freed.
func (hs *Holds) Release(path string, errno syscall.Errno) int {
	if path == "" {
		return hs.release(func(*hold) bool { return true }, errno)
	}
	canon := hs.canonical(path)
	return hs.release(func(h *hold) bool { return hs.canonical(h.Path) == canon }, errno)
}

// ReleaseID is Release for the hold with that id.
func (hs *Holds) ReleaseID(id int, errno syscall.Errno) int {
	return hs.release(func(h *hold) bool { return h.ID == id }, errno)
}

func (hs *Holds) release(match func(*hold) bool, errno syscall.Errno) int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	freed := 0
	for id, h := range hs.armed {
		if !match(h) {
			continue
		}
		freed += h.Waiting
		h.errno = errno
		close(h.release)
		delete(hs.armed, id)
	}
	return freed
}

// ReleaseAll is Release("", errno).
func (hs *Holds) ReleaseAll(errno syscall.Errno) int { return hs.Release("", errno) }

// List reports the armed holds by id.
func (hs *Holds) List() []HoldState {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	out := make([]HoldState, 0, len(hs.armed))
	for _, h := range hs.armed {
		out = append(out, h.HoldState)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// wait counts a write to p against every armed hold and, when one fires,
// blocks until it is released; it returns the errno the write must fail
// with, or 0 to let it reach the kernel.
func (hs *Holds) wait(p string) syscall.Errno {
	hs.mu.Lock()
	if len(hs.armed) == 0 {
		hs.mu.Unlock()
		return 0
	}
	canon := hs.canonical(p)
	ids := make([]int, 0, len(hs.armed))
	for id := range hs.armed {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var fire *hold
	for _, id := range ids {
		h := hs.armed[id]
		// The hold's own path is resolved now: it may name a VF that did
		// not exist when the hold was armed.
		if hs.canonical(h.Path) != canon {
			continue
		}
		h.Seen++
		if fire == nil && (h.Seen == h.Nth || h.Always && h.Seen > h.Nth) {
			fire = h
		}
	}
	if fire == nil {
		hs.mu.Unlock()
		return 0
	}
	fire.Waiting++
	hs.mu.Unlock()

	<-fire.release

	hs.mu.Lock()
	defer hs.mu.Unlock()
	fire.Waiting--
	return fire.errno
}
