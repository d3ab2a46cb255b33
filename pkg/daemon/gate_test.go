package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/engine/enginetest"
)

// The gate tests tell peers apart by the abstract address each client
// binds (dialAs): "@vgpu-gate-<pid>-<uid>-<n>". A client that binds none
// (the rig's own) is root. uids from 2000 are in group 0, which the rig's
// LookupGroup gives every group name: with socket.admin-group set, admins.
var dialSeq atomic.Int64

func credByAddr(nc net.Conn) (Peer, error) {
	f := strings.Split(nc.RemoteAddr().String(), "-")
	if len(f) != 5 || f[0] != "@vgpu" {
		return Peer{PID: os.Getpid()}, nil
	}
	uid, err := strconv.Atoi(f[3])
	if err != nil {
		return Peer{}, err
	}
	gid := uid
	if uid >= 2000 {
		gid = 0
	}
	return Peer{PID: 4000 + uid, UID: uid, GID: gid}, nil
}

// dialAs connects to sock as uid (to credByAddr).
func dialAs(t *testing.T, sock string, uid int) *net.UnixConn {
	t.Helper()
	laddr := &net.UnixAddr{Name: fmt.Sprintf("@vgpu-gate-%d-%d-%d", os.Getpid(), uid, dialSeq.Add(1)), Net: "unix"}
	c, err := net.DialUnix("unix", laddr, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// send writes one request on c; body "" sends none.
func send(t *testing.T, c net.Conn, method, path, body string) {
	t.Helper()
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: vgpud\r\n", method, path)
	if body != "" {
		req += fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	if _, err := io.WriteString(c, req+"\r\n"+body); err != nil {
		t.Fatalf("send %s %s: %v", method, path, err)
	}
}

// readAnswer reads one answer from c, within a minute.
func readAnswer(t *testing.T, c net.Conn) (*http.Response, api.Error) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	defer resp.Body.Close()
	var e api.Error
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &e)
	return resp, e
}

// closedByServer reports whether the server closed c (a read ends).
func closedByServer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// waitFor polls cond for up to a minute: the gate accepts and sweeps on
// its own goroutines.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

// count reads the gate's numbers.
func (g *gate) count() (served, waiting int, open map[int]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	open = map[int]int{}
	for uid, q := range g.peers {
		open[uid] = q.open
	}
	return g.served, g.waitingLocked(), open
}

// cfgAdmins gives the API an admin group.
const cfgAdmins = cfgMixed + "socket:\n  group: libvirt\n  admin-group: vgpu-admins\n"

func gateRig(t *testing.T, lim ConnLimits) *rig {
	t.Helper()
	r := newRig(t, simkernel.NewExample(t, "mixed.yaml"), cfgAdmins)
	r.cred, r.limits = credByAddr, &lim
	r.run()
	r.c.Close() // its idle keep-alive connection would hold a slot
	waitFor(t, "the rig's connection to close", func() bool { s, _, _ := r.d.gate.count(); return s == 0 })
	return r
}

func reserveBody(name string) string {
	return fmt.Sprintf(`{"name":%q,"profile":"mi25-4g","count":1}`, name)
}

// A member past its quota is refused with an answer that says why; root,
// other members and an admin with as many connections are served.
func TestGateRefusesOverQuota(t *testing.T) {
	lim := DefaultConnLimits()
	lim.PeerOpen, lim.PeerServed = 4, 2
	r := gateRig(t, lim)
	for range lim.PeerOpen {
		dialAs(t, r.socket, 1000)
	}
	waitFor(t, "uid 1000's connections", func() bool { _, _, o := r.d.gate.count(); return o[1000] == lim.PeerOpen })
	if s, w, _ := r.d.gate.count(); s != 2 || w != 2 {
		t.Fatalf("uid 1000's 4 connections: %d served, %d waiting; want 2 and 2 (its PeerServed)", s, w)
	}
	extra := dialAs(t, r.socket, 1000)
	send(t, extra, "GET", api.PathHealth, "")
	resp, e := readAnswer(t, extra)
	if resp.StatusCode != http.StatusTooManyRequests || e.Kind != api.KindTooMany || !strings.Contains(e.Error, "uid 1000") {
		t.Fatalf("uid 1000's fifth connection: %d %+v; want 429 too-many-connections naming uid 1000", resp.StatusCode, e)
	}
	for range lim.PeerOpen {
		dialAs(t, r.socket, 2000)
	}
	for _, uid := range []int{0, 1001, 2000} {
		c := dialAs(t, r.socket, uid)
		send(t, c, "GET", api.PathHealth, "")
		if resp, e := readAnswer(t, c); resp.StatusCode != http.StatusOK {
			t.Fatalf("uid %d beside the holder: %d %+v", uid, resp.StatusCode, e)
		}
	}
}

// Members cannot take the slots kept for root; a member waiting for a
// slot gets it once the idle members' connections pass their deadline,
// which its waiting tightens.
func TestGateKeepsSlotsForRoot(t *testing.T) {
	lim := DefaultConnLimits()
	lim.Served, lim.Reserved, lim.PeerServed, lim.PeerOpen = 4, 2, 4, 8
	lim.Header, lim.IdleMember = 300*time.Millisecond, 0
	r := gateRig(t, lim)
	idle := []net.Conn{dialAs(t, r.socket, 1000), dialAs(t, r.socket, 1000)}
	waitFor(t, "uid 1000's connections served", func() bool { s, _, _ := r.d.gate.count(); return s == 2 })
	root := dialAs(t, r.socket, 0)
	send(t, root, "GET", api.PathHealth, "")
	if resp, e := readAnswer(t, root); resp.StatusCode != http.StatusOK {
		t.Fatalf("root beside members at their share: %d %+v", resp.StatusCode, e)
	}
	other := dialAs(t, r.socket, 1001)
	send(t, other, "GET", api.PathHealth, "")
	if resp, e := readAnswer(t, other); resp.StatusCode != http.StatusOK {
		t.Fatalf("uid 1001 waiting for a member's slot: %d %+v", resp.StatusCode, e)
	}
	for i, c := range idle {
		if !closedByServer(c) {
			t.Fatalf("uid 1000's idle connection %d was kept while another member waited", i)
		}
	}
}

// A root connection takes the slot of a member's that is not working at
// once, without waiting for any deadline, and that of an admin's idle
// between two requests.
func TestGateRootTakesASlot(t *testing.T) {
	for _, uid := range []int{1000, 2000} {
		t.Run(strconv.Itoa(uid), func(t *testing.T) {
			lim := DefaultConnLimits()
			lim.Served, lim.Reserved, lim.PeerServed = 2, 0, 2
			lim.Header, lim.IdleMember, lim.Body, lim.IdlePrivileged = time.Hour, time.Hour, time.Hour, time.Hour
			r := gateRig(t, lim)
			for range 2 {
				c := dialAs(t, r.socket, uid)
				if uid >= 2000 { // an admin's connection that has not sent its request yet is kept
					send(t, c, "GET", api.PathHealth, "")
					readAnswer(t, c)
				}
			}
			waitFor(t, "the holder's connections served", func() bool { s, _, _ := r.d.gate.count(); return s == 2 })
			root := dialAs(t, r.socket, 0)
			start := time.Now()
			send(t, root, "GET", api.PathHealth, "")
			if resp, e := readAnswer(t, root); resp.StatusCode != http.StatusOK {
				t.Fatalf("root with every slot uid %d's: %d %+v", uid, resp.StatusCode, e)
			}
			// The server's own header deadline (10 s) would have freed one too.
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("root was answered after %v: it waited for a deadline", d)
			}
		})
	}
}

// A waiting connection whose client hangs up is dropped unread, and a
// served request whose client hangs up before its change begins (here:
// while it waits for the host lock) changes nothing.
func TestGateHungUpRequestsAreNotCarriedOut(t *testing.T) {
	lim := DefaultConnLimits()
	lim.Served, lim.Reserved = 2, 0
	r := gateRig(t, lim)
	unlockHost := r.d.engine.LockHost() // a prepare at work, as it were
	locked := true
	defer func() {
		if locked {
			unlockHost()
		}
	}()
	a, b := dialAs(t, r.socket, 0), dialAs(t, r.socket, 0)
	send(t, a, "POST", api.ReservationsPath(domA), reserveBody("web01"))
	send(t, b, "POST", api.ReservationsPath(domB), reserveBody("db01"))
	waitFor(t, "two reservations served", func() bool { s, _, _ := r.d.gate.count(); return s == 2 })
	const domC = "2a1b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
	c := dialAs(t, r.socket, 0)
	send(t, c, "POST", api.ReservationsPath(domC), reserveBody("abandoned"))
	waitFor(t, "the third to wait", func() bool { _, w, _ := r.d.gate.count(); return w == 1 })
	_ = c.Close()
	waitFor(t, "the hung-up waiter to be dropped", func() bool { _, w, _ := r.d.gate.count(); return w == 0 })
	_ = a.Close()
	time.Sleep(50 * time.Millisecond) // whether or not the server noticed, the change must not begin
	unlockHost()
	locked = false
	if resp, e := readAnswer(t, b); resp.StatusCode != http.StatusOK {
		t.Fatalf("the reservation whose client waited: %d %+v", resp.StatusCode, e)
	}
	as := r.allocations()
	if len(as) != 1 || as[0].DomainUUID != domB {
		t.Fatalf("the ledger holds %+v; want only db01's reservation", as)
	}
}

// logHook calls on for every record, then hands it on.
type logHook struct {
	slog.Handler
	on func(slog.Record)
}

func (logHook) Enabled(context.Context, slog.Level) bool { return true }

func (h logHook) Handle(ctx context.Context, rec slog.Record) error {
	h.on(rec)
	return h.Handler.Handle(ctx, rec)
}

func (h logHook) WithAttrs(as []slog.Attr) slog.Handler {
	return logHook{Handler: h.Handler.WithAttrs(as), on: h.on}
}

func (h logHook) WithGroup(name string) slog.Handler {
	return logHook{Handler: h.Handler.WithGroup(name), on: h.on}
}

// A reservation whose client hangs up after the ledger write and before
// the answer is taken back; what the domain held before stays.
func TestReservationUndoneWhenItsClientLeavesBeforeTheAnswer(t *testing.T) {
	var vanish atomic.Pointer[net.UnixConn]
	var undone atomic.Int32
	r := newRig(t, simkernel.NewExample(t, "mixed.yaml"), cfgMixed)
	r.cred = credByAddr
	r.log = slog.New(logHook{Handler: enginetest.Logger().Handler(), on: func(rec slog.Record) {
		switch rec.Message {
		case "reserved": // after the ledger write, before the answer
			if c := vanish.Swap(nil); c != nil {
				_ = c.Close()
			}
		case "reservation taken back: its caller hung up before the answer":
			undone.Add(1)
		}
	}})
	r.run()
	c := dialAs(t, r.socket, 0)
	vanish.Store(c)
	send(t, c, "POST", api.ReservationsPath(domA), reserveBody("web01"))
	waitFor(t, "the reservation to be taken back", func() bool { return undone.Load() == 1 })
	if as := r.allocations(); len(as) != 0 {
		t.Fatalf("a reservation nobody heard of is held: %+v", as)
	}
	// The domain holds one; a top-up to two whose client vanishes takes
	// back only the second.
	if _, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 1}); err != nil {
		t.Fatal(err)
	}
	held := r.allocations()
	c = dialAs(t, r.socket, 0)
	vanish.Store(c)
	send(t, c, "POST", api.ReservationsPath(domA), `{"name":"web01","profile":"mi25-4g","count":2}`)
	waitFor(t, "the top-up to be taken back", func() bool { return undone.Load() == 2 })
	if as := r.allocations(); len(as) != 1 || as[0].VGPU != held[0].VGPU {
		t.Fatalf("after the vanished top-up the ledger holds %+v; want %+v", as, held)
	}
}

// While a connection waits, answers close theirs so that it is served.
func TestGateAnswersCloseUnderPressure(t *testing.T) {
	lim := DefaultConnLimits()
	lim.Served, lim.Reserved = 1, 0
	lim.Header, lim.IdlePrivileged = time.Hour, time.Hour
	r := gateRig(t, lim)
	a := dialAs(t, r.socket, 0)
	waitFor(t, "the first connection served", func() bool { s, _, _ := r.d.gate.count(); return s == 1 })
	b := dialAs(t, r.socket, 0)
	send(t, b, "GET", api.PathHealth, "")
	waitFor(t, "the second to wait", func() bool { _, w, _ := r.d.gate.count(); return w == 1 })
	send(t, a, "GET", api.PathHealth, "")
	if resp, e := readAnswer(t, a); resp.StatusCode != http.StatusOK || !resp.Close {
		t.Fatalf("answer while another waits: %d %+v, close %v; want 200 closing the connection", resp.StatusCode, e, resp.Close)
	}
	if resp, e := readAnswer(t, b); resp.StatusCode != http.StatusOK {
		t.Fatalf("the waiting one: %d %+v", resp.StatusCode, e)
	}
}

// A member's slow body and slow header are cut short once someone waits:
// the deadlines tighten; the slow body's request changes nothing. Root's
// connection that has not sent its request yet is kept.
func TestGateShedsSlowClientsUnderPressure(t *testing.T) {
	lim := DefaultConnLimits()
	lim.Served, lim.Reserved, lim.PeerServed = 3, 0, 1
	lim.Header, lim.Body = 300*time.Millisecond, 300*time.Millisecond
	r := gateRig(t, lim)
	slowBody := dialAs(t, r.socket, 1000)
	if _, err := io.WriteString(slowBody, "POST "+api.ReservationsPath(domA)+" HTTP/1.1\r\nHost: vgpud\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\""); err != nil {
		t.Fatal(err)
	}
	slowHeader := dialAs(t, r.socket, 1001)
	if _, err := io.WriteString(slowHeader, "GET /v1/hea"); err != nil {
		t.Fatal(err)
	}
	quiet := dialAs(t, r.socket, 0)
	waitFor(t, "all three served", func() bool { s, _, _ := r.d.gate.count(); return s == 3 })
	w := dialAs(t, r.socket, 1002)
	send(t, w, "GET", api.PathHealth, "")
	if resp, e := readAnswer(t, w); resp.StatusCode != http.StatusOK {
		t.Fatalf("the waiting member: %d %+v", resp.StatusCode, e)
	}
	if !closedByServer(slowHeader) {
		t.Fatal("the slow header's connection was kept")
	}
	// The slow body's connection ends (an answer to the cut-short body,
	// if any, then the close).
	_ = slowBody.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadAll(slowBody); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the slow body's connection was kept")
	}
	if as := r.allocations(); len(as) != 0 {
		t.Fatalf("the slow body's request changed the ledger: %+v", as)
	}
	send(t, quiet, "GET", api.PathHealth, "")
	if resp, e := readAnswer(t, quiet); resp.StatusCode != http.StatusOK {
		t.Fatalf("root's connection that was quiet a while: %d %+v", resp.StatusCode, e)
	}
}

// The admin group's members are sorted as admins, others as members.
func TestPeerClass(t *testing.T) {
	r := start(t, simkernel.NewExample(t, "mixed.yaml"), cfgMixed+"socket:\n  group: libvirt\n  admin-group: vgpu-admins\n")
	for _, c := range []struct {
		p    Peer
		want peerClass
	}{
		{Peer{UID: 0}, classRoot},
		{Peer{UID: 1000, GID: 1000, Groups: []int{os.Getgid()}}, classAdmin}, // the rig's LookupGroup: every group is ours
		{Peer{UID: 1000, GID: 1000, Groups: []int{os.Getgid() + 1}}, classMember},
	} {
		if got := r.d.peerClass(c.p); got != c.want {
			t.Errorf("%+v: %s, want %s", c.p, got, c.want)
		}
	}
}
