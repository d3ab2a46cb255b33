package change

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A hang-up before Begin ends the change's context, and Begin refuses.
func TestHangUpBeforeBegin(t *testing.T) {
	req, hangUp := context.WithCancel(context.Background())
	ctx := Bind(req, nil)
	hangUp()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the change's context lives on after its client hung up")
	}
	if err := Begin(ctx); !errors.Is(err, ErrClientGone) {
		t.Fatalf("Begin after the hang-up = %v; want ErrClientGone", err)
	}
	if !Abandoned(ctx) {
		t.Fatal("not reported abandoned")
	}
}

// After Begin, a hang-up no longer ends the context: the change finishes.
func TestBegunOutlivesHangUp(t *testing.T) {
	req, hangUp := context.WithCancel(context.Background())
	ctx := Bind(req, func() bool { return true })
	if err := Begin(ctx); err != nil {
		t.Fatal(err)
	}
	hangUp()
	time.Sleep(20 * time.Millisecond) // AfterFunc runs on its own goroutine
	if ctx.Err() != nil || Abandoned(ctx) {
		t.Fatalf("begun change: err %v, abandoned %v", ctx.Err(), Abandoned(ctx))
	}
	if err := Begin(ctx); err != nil {
		t.Fatalf("second Begin = %v", err)
	}
}

// Begin asks the connection: a hang-up the server has not noticed yet
// still stops the change, and ends its context.
func TestBeginAsksTheConnection(t *testing.T) {
	ctx := Bind(context.Background(), func() bool { return false })
	if err := Begin(ctx); !errors.Is(err, ErrClientGone) {
		t.Fatalf("Begin with the client gone = %v; want ErrClientGone", err)
	}
	if ctx.Err() == nil || !Abandoned(ctx) {
		t.Fatalf("after a refused Begin: err %v, abandoned %v", ctx.Err(), Abandoned(ctx))
	}
}

// A context that was never bound has no point of no return.
func TestUnboundContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Begin(ctx); err != nil || Abandoned(ctx) {
		t.Fatalf("unbound: Begin %v, abandoned %v", err, Abandoned(ctx))
	}
}

// Derived contexts (an engine's timeout) see the same point of no return.
func TestDerivedContext(t *testing.T) {
	req, hangUp := context.WithCancel(context.Background())
	ctx := Bind(req, nil)
	sub, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	if err := Begin(sub); err != nil {
		t.Fatal(err)
	}
	hangUp()
	time.Sleep(20 * time.Millisecond)
	if sub.Err() != nil || ctx.Err() != nil {
		t.Fatalf("begun through a derived context, then hung up: %v, %v", sub.Err(), ctx.Err())
	}
}
