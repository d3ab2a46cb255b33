package pcitest

import (
	"io"
	"testing"
	"time"
)

// The waits are generous, so that a slow machine does not fail a test:
// Grace for a call that must block to show it does not, Patience for one
// that must return to do so.
const (
	Grace    = 200 * time.Millisecond
	Patience = 10 * time.Second
)

// Async runs op in a goroutine; the channel delivers its error.
func Async(op func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- op() }()
	return done
}

// StillBlocked checks that the call behind done (Async) waits while a VM
// holds a device: it fails t if done delivers within Grace. what names the
// call in messages.
func StillBlocked(t testing.TB, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while the device was held", what, err)
	case <-time.After(Grace):
	}
}

// Released checks that the call behind done returns nil once the device
// is released, within Patience.
func Released(t testing.TB, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(Patience):
		t.Fatalf("%s did not return after the device was released", what)
	}
}

// BlocksUntilReleased checks a kernel call that waits while a VM holds a
// device, as removing an mdev or disabling VFs does: op, run with h open,
// must not return until h is closed, and must then return nil. what names
// op in messages.
func BlocksUntilReleased(t testing.TB, what string, h io.Closer, op func() error) {
	t.Helper()
	done := Async(op)
	StillBlocked(t, what, done)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	Released(t, what, done)
}
