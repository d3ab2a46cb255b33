package clienttest

import (
	"context"
	"testing"
	"time"
)

// Patience bounds Serve's waits for a vgpud to answer and to stop: a
// liveness bound on a loaded machine, not a timing assertion.
const Patience = 30 * time.Second

// Client is what Serve needs of a *client.Client on the vgpud's socket
// (an interface: pkg/client's own tests use this package).
type Client interface {
	Available(ctx context.Context, timeout time.Duration) bool
	Close()
}

// Server is a vgpud that Serve runs in process.
type Server struct {
	c      Client
	t      testing.TB
	cancel context.CancelFunc
	done   chan error
}

// Serve runs serve (a vgpud's Run on the context it is given) and returns
// once c, a client on its socket, has an answer: serve's return before
// that, or no answer within Patience, fails t. The test's Cleanup stops
// it.
func Serve(t testing.TB, c Client, serve func(context.Context) error) *Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{c: c, t: t, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- serve(ctx) }()
	deadline := time.Now().Add(Patience)
	for !c.Available(context.Background(), time.Second) {
		select {
		case err := <-s.done:
			s.cancel, s.done = nil, nil
			cancel()
			t.Fatalf("vgpud stopped before it answered: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			t.Fatalf("vgpud did not answer within %s", Patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(s.Stop)
	return s
}

// Stop cancels serve's context, closes the client's idle connections and
// waits for serve to return, failing the test on an error or when it does
// not return within Patience. Once it did, Stop does nothing.
func (s *Server) Stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	s.c.Close()
	select {
	case err := <-s.done:
		if err != nil {
			s.t.Errorf("vgpud stopped with %v", err)
		}
	case <-time.After(Patience):
		s.t.Errorf("vgpud did not stop within %s", Patience)
	}
}
