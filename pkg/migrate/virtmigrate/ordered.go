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

// do runs fn after every change asked before it, and waits up to limit
// for its answer. Past limit it answers migrate.ErrNoAnswer: the change
// is sent, or queued behind an earlier one, and libvirt applies it when
// it answers.
func (o *ordered) do(what string, limit time.Duration, fn func() error) error {
	o.mu.Lock()
	prev, done := o.last, make(chan struct{})
	o.last = done
	o.mu.Unlock()
	answer := make(chan error, 1)
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		answer <- fn()
	}()
	select {
	case err := <-answer:
		return err
	case <-time.After(limit):
		return fmt.Errorf("%s: %w within %s; it goes on, after any change asked before it", what, migrate.ErrNoAnswer, limit)
	}
}
