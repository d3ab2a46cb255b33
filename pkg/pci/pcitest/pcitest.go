package pcitest

import (
	"io"
	"testing"
	"time"
)

// BlocksUntilReleased checks a kernel call that waits while a VM holds a
// device, as removing an mdev or disabling VFs does: op, run with h open,
// must not return until h is closed, and must then return nil. what names
// op in messages. The waits are generous, so that a slow machine does not
// fail the test.
func BlocksUntilReleased(t testing.TB, what string, h io.Closer, op func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while the device was held", what, err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return after the device was released", what)
	}
}
