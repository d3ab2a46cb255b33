package virtmigrate

import (
	"fmt"
	"sync"
	"time"

	"github.com/vgpu-project/vgpu/pkg/migrate"
)

// ordered sends one kind of control change of a running job (the downtime
// limit, the throttle ceiling) one after another, in the order asked. A
// change libvirt has not answered within its bound goes on in the
// background and the next waits for it before it is sent: libvirt does
// not say which of two calls in flight gets the domain's job first, and a
// late answer must never put back a value the run has since replaced.
type ordered struct {
	mu sync.Mutex
	// last is closed once the newest change asked has been answered; nil
	// before the first.
	last chan struct{}
}

// do runs fn after every change asked before it, bounded: past limit
// the change is sent, or queued behind an earlier one, and libvirt applies
// it when it answers.
func (o *ordered) do(what string, limit time.Duration, fn func() error) error {
	o.mu.Lock()
	prev, done := o.last, make(chan struct{})
	o.last = done
	o.mu.Unlock()
	return bounded(what, limit, func() error {
		defer close(done)
		if prev != nil {
			<-prev
		}
		return fn()
	})
}

// bounded runs fn, giving up waiting after limit: fn goes on in the
// background, its answer dropped, and the error is a noAnswer.
func bounded(what string, limit time.Duration, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		return noAnswer{what, limit}
	}
}

// noAnswer is a control of the job libvirt has not answered within limit:
// migrate.ErrNoAnswer.
type noAnswer struct {
	what  string
	limit time.Duration
}

func (e noAnswer) Error() string {
	return fmt.Sprintf("%s: libvirt did not answer within %s", e.what, e.limit)
}
func (e noAnswer) Unwrap() error { return migrate.ErrNoAnswer }
