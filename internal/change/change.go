package change

import (
	"context"
	"errors"
	"sync"
)

// ErrClientGone: the client hung up before the change began; nothing was
// changed.
var ErrClientGone = errors.New("the client hung up before the change began; nothing was changed")

type key struct{}

// state is one request's change: begun once Begin succeeds.
type state struct {
	mu     sync.Mutex
	begun  bool
	cancel context.CancelCauseFunc
	// alive asks the connection whether the client is still there: the
	// server may not have noticed a hang-up yet (it reads the socket only
	// once the request's body is read whole).
	alive func() bool
}

// Bind returns the context of a change asked for by the request whose
// context is req: it carries req's values, and ends with cause
// ErrClientGone when req ends before the change begins. alive, when not
// nil, says whether the client is still connected; Begin asks it.
func Bind(req context.Context, alive func() bool) context.Context {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(req))
	s := &state{cancel: cancel, alive: alive}
	context.AfterFunc(req, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.begun {
			cancel(ErrClientGone)
		}
	})
	return context.WithValue(ctx, key{}, s)
}

// Begin marks the point of no return of the change ctx carries: it
// returns an error (matching ErrClientGone when the client hung up) if the
// change must not be made, and otherwise detaches ctx from the client for
// good. Calling it again is a no-op. A context from elsewhere (a reconcile
// of vgpud's own, a test) has no point of no return: Begin returns nil.
func Begin(ctx context.Context) error {
	s := stateOf(ctx)
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.begun {
		return nil
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if s.alive != nil && !s.alive() {
		s.cancel(ErrClientGone)
		return ErrClientGone
	}
	s.begun = true
	return nil
}

// Abandoned reports whether ctx's change was given up before it began
// because its client hung up: nothing was changed for it.
func Abandoned(ctx context.Context) bool {
	s := stateOf(ctx)
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.begun && errors.Is(context.Cause(ctx), ErrClientGone)
}

// stateOf is the change ctx carries; nil when it was never bound.
func stateOf(ctx context.Context) *state {
	s, _ := ctx.Value(key{}).(*state)
	return s
}
