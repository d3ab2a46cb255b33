package alloc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/ledger"
)

func TestClaim(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	host := twoMI25()
	a, b := host[0].ID, host[5].ID

	// Free: allocated now; the domain's own: kept; repeated: the same.
	got, err := r.a.Claim(ctx, req(1, 1), []string{a}, host)
	if err != nil || ids(got) != a || got[0].State != ledger.StateReserved {
		t.Fatalf("Claim free = %+v, %v", got, err)
	}
	got, err = r.a.Claim(ctx, req(1, 2), []string{b, a}, host)
	if err != nil || ids(got) != a+" "+b {
		t.Fatalf("Claim own + free = %+v, %v", got, err)
	}

	for _, tc := range []struct {
		name string
		req  Request
		ids  []string
		want error
		msg  string
	}{
		{"held by another", req(2, 1), []string{a}, ErrConflict, "reserved for domain vm1"},
		{"not on host", req(2, 1), []string{"0000:99:00.1"}, ErrNoSuchVGPU, "not on this host"},
		{"other profile", Request{Profile: "mi25-2g", Count: 1, DomainUUID: uuidN(2), DomainName: "vm2"}, []string{host[2].ID}, ErrNoSuchVGPU, "is a mi25-4g vGPU, not mi25-2g"},
		{"count mismatch", req(2, 2), []string{host[2].ID}, ErrInvalid, "does not match"},
		{"twice", req(2, 2), []string{host[2].ID, host[2].ID}, ErrInvalid, "named twice"},
		{"bad id", req(2, 1), []string{"../etc"}, ErrBadVGPU, "neither a PCI address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.a.Claim(ctx, tc.req, tc.ids, host)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v; want %v with %q", err, tc.want, tc.msg)
			}
		})
	}
	// A refused claim records nothing, even for the ids before the bad one.
	if _, err := r.a.Claim(ctx, req(2, 2), []string{host[3].ID, a}, host); !errors.Is(err, ErrConflict) {
		t.Fatal(err)
	}
	if al, _ := r.l.Allocations(); len(al) != 2 {
		t.Fatalf("allocations after a refused claim: %+v", al)
	}

	// A lease of the domain becomes its allocation; another's lease refuses.
	if _, err := r.a.Lease(ctx, req(3, 1), host[6:7], time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := r.a.Claim(ctx, req(2, 1), []string{host[6].ID}, host); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "leased to incoming domain vm3") {
		t.Fatalf("claim of another's lease: %v", err)
	}
	got, err = r.a.Claim(ctx, req(3, 1), []string{host[6].ID}, host)
	if err != nil || ids(got) != host[6].ID {
		t.Fatalf("claim of own lease = %+v, %v", got, err)
	}
	if ls, _ := r.l.Leases(); len(ls) != 0 {
		t.Fatalf("lease left after the claim: %+v", ls)
	}

	// In use outside vgpud.
	busy := twoMI25()
	busy[7].InUse, busy[7].Holder = true, "/dev/vfio/9 is open"
	if _, err := r.a.Claim(ctx, req(4, 1), []string{busy[7].ID}, busy); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "outside vgpud") {
		t.Fatalf("claim of a busy vGPU: %v", err)
	}
}

func TestStopAndUnreserve(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	host := twoMI25()
	got := r.allocate(t, req(1, 2), host)
	if _, err := r.a.Attach(ctx, uuidN(1)); err != nil {
		t.Fatal(err)
	}
	// Attached vGPUs cannot be unreserved, one or all; nothing is deleted.
	for _, v := range []string{"", got[0].VGPU} {
		if _, err := r.a.Unreserve(ctx, uuidN(1), v); !errors.Is(err, ErrAttached) || !errors.Is(err, ErrConflict) {
			t.Fatalf("Unreserve(%q) while attached: %v", v, err)
		}
	}
	stopped, err := r.a.MarkStopped(ctx, uuidN(1))
	if err != nil || len(stopped) != 2 || stopped[0].State != ledger.StateReserved {
		t.Fatalf("MarkStopped = %+v, %v", stopped, err)
	}
	if again, err := r.a.MarkStopped(ctx, uuidN(1)); err != nil || len(again) != 0 {
		t.Fatalf("MarkStopped again = %+v, %v", again, err)
	}
	if _, err := r.a.Unreserve(ctx, uuidN(1), host[7].ID); !errors.Is(err, ErrNotAllocated) {
		t.Fatalf("Unreserve of a vGPU not held: %v", err)
	}
	one, err := r.a.Unreserve(ctx, uuidN(1), got[1].VGPU)
	if err != nil || ids(one) != got[1].VGPU {
		t.Fatalf("Unreserve one = %+v, %v", one, err)
	}
	rest, err := r.a.Unreserve(ctx, uuidN(1), "")
	if err != nil || ids(rest) != got[0].VGPU {
		t.Fatalf("Unreserve rest = %+v, %v", rest, err)
	}
	if none, err := r.a.Unreserve(ctx, uuidN(1), ""); err != nil || len(none) != 0 {
		t.Fatalf("Unreserve of nothing = %+v, %v", none, err)
	}
}

func TestClaimAttach(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	host := twoMI25()
	a, b := host[0].ID, host[5].ID
	if _, err := r.a.Claim(ctx, req(1, 1), []string{a}, host); err != nil {
		t.Fatal(err)
	}

	// ready fails: nothing of the claim or the attach is kept, not even the
	// free vGPU it named.
	boom := errors.New("write vgpu_params: EIO")
	ran := 0
	_, err := r.a.ClaimAttach(ctx, req(1, 2), []string{a, b}, host, func() error { ran++; return boom })
	if !errors.Is(err, boom) || ran != 1 {
		t.Fatalf("ClaimAttach with a failing ready = %v (ready ran %d times)", err, ran)
	}
	if al, _ := r.l.Allocations(); len(al) != 1 || al[0].VGPU != a || al[0].State != ledger.StateReserved {
		t.Fatalf("allocations after a failed ready: %+v", al)
	}

	// A refused claim runs no ready.
	if _, err := r.a.ClaimAttach(ctx, req(2, 1), []string{a}, host, func() error { ran++; return nil }); !errors.Is(err, ErrConflict) || ran != 1 {
		t.Fatalf("ClaimAttach of another's vGPU = %v (ready ran %d times)", err, ran)
	}

	// Claimed and attached at once, ready in between.
	got, err := r.a.ClaimAttach(ctx, req(1, 2), []string{b, a}, host, func() error {
		ran++
		return nil
	})
	if err != nil || ids(got) != a+" "+b || ran != 2 {
		t.Fatalf("ClaimAttach = %+v, %v (ready ran %d times)", got, err, ran)
	}
	for _, al := range got {
		if al.State != ledger.StateAttached {
			t.Fatalf("ClaimAttach left %s %s", al.VGPU, al.State)
		}
	}

	// No ids: only the attach, as Attach; nothing held is refused.
	if _, err := r.a.MarkStopped(ctx, uuidN(1)); err != nil {
		t.Fatal(err)
	}
	got, err = r.a.ClaimAttach(ctx, req(1, 2), nil, nil, nil)
	if err != nil || ids(got) != a+" "+b || got[0].State != ledger.StateAttached {
		t.Fatalf("ClaimAttach without ids = %+v, %v", got, err)
	}
	if _, err := r.a.ClaimAttach(ctx, req(5, 1), nil, nil, nil); !errors.Is(err, ErrNotAllocated) {
		t.Fatalf("ClaimAttach for a domain holding nothing = %v", err)
	}
}
