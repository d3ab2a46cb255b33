package alloc

import (
	"context"
	"errors"
	"testing"

	"github.com/vgpu-project/vgpu/internal/change"
	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// Grant says what it made; Revoke takes back only that, and only while it
// is as granted.
func TestGrantRevoke(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	host := twoMI25()
	held, granted, err := r.a.Grant(ctx, req(1, 1), host)
	if err != nil || len(held) != 1 || len(granted) != 1 {
		t.Fatalf("first grant: %v, %v, %v", held, granted, err)
	}
	// Asked again for two: the one held is kept, one more is granted.
	r.clock.Add(1)
	all, more, err := r.a.Grant(ctx, req(1, 2), host)
	if err != nil || len(all) != 2 || len(more) != 1 || more[0].VGPU == held[0].VGPU {
		t.Fatalf("top-up: all %v, granted %v, %v", ids(all), ids(more), err)
	}
	gone, err := r.a.Revoke(ctx, more)
	if err != nil || len(gone) != 1 || gone[0].VGPU != more[0].VGPU {
		t.Fatalf("revoke the top-up: %v, %v", ids(gone), err)
	}
	as, _ := r.l.Allocations()
	if len(as) != 1 || as[0].VGPU != held[0].VGPU {
		t.Fatalf("after the revoke the ledger holds %v; want only %s", ids(as), held[0].VGPU)
	}
	// Attached since: not taken back.
	if _, err := r.a.Attach(ctx, uuidN(1)); err != nil {
		t.Fatal(err)
	}
	if gone, err := r.a.Revoke(ctx, granted); err != nil || len(gone) != 0 {
		t.Fatalf("revoke of an attached allocation: %v, %v", ids(gone), err)
	}
	// Freed and granted again (another moment): the old grant is not it.
	if _, err := r.a.ReleaseDomain(ctx, uuidN(1)); err != nil {
		t.Fatal(err)
	}
	r.clock.Add(1)
	if _, _, err := r.a.Grant(ctx, req(1, 1), host); err != nil {
		t.Fatal(err)
	}
	if gone, err := r.a.Revoke(ctx, granted); err != nil || len(gone) != 0 {
		t.Fatalf("revoke of a later grant of the same vGPU: %v, %v", ids(gone), err)
	}
	if as, _ := r.l.Allocations(); len(as) != 1 || as[0].State != ledger.StateReserved {
		t.Fatalf("ledger: %+v", as)
	}
}

// A caller who hung up before the write transaction gets nothing, and
// nothing is written.
func TestGrantForAGoneClient(t *testing.T) {
	r := newRig(t)
	req0, hangUp := context.WithCancel(context.Background())
	ctx := change.Bind(req0, nil)
	hangUp()
	<-ctx.Done()
	if _, _, err := r.a.Grant(ctx, req(1, 1), twoMI25()); !errors.Is(err, context.Canceled) && !errors.Is(err, change.ErrClientGone) {
		t.Fatalf("grant for a gone client: %v", err)
	}
	// The connection says the client is gone before the server noticed.
	ctx = change.Bind(context.Background(), func() bool { return false })
	if _, _, err := r.a.Grant(ctx, req(1, 1), twoMI25()); !errors.Is(err, change.ErrClientGone) {
		t.Fatalf("grant for a client whose connection hung up: %v", err)
	}
	if _, err := r.a.Unreserve(ctx, uuidN(1), ""); !errors.Is(err, context.Canceled) && !errors.Is(err, change.ErrClientGone) {
		t.Fatalf("unreserve for a gone client: %v", err)
	}
	if as, _ := r.l.Allocations(); len(as) != 0 {
		t.Fatalf("a gone client's grant was written: %+v", as)
	}
}
