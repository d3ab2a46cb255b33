package daemon

import (
	"bufio"
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/pkg/api"
)

// The API's connections go through a gate. It accepts every connection
// the moment it comes, asks the kernel who it is from (SO_PEERCRED), and
// then serves it, lets it wait for a slot, or refuses it:
//
//   - at most Served connections are served at once (a goroutine and its
//     buffers each); Reserved of them are for root and socket.admin-group
//     alone, so the hook and the admins always find one;
//   - a member (a uid neither root nor in socket.admin-group, who may only
//     read) has at most PeerOpen connections open and PeerServed of them
//     served; past PeerOpen its new connections are refused (429, kind
//     too-many-connections): its own, no one else's. Root and the admins,
//     whom vgpud trusts with the host, have no quota;
//   - a waiting connection costs its descriptor and no read: root's wait
//     first, then the admins', then the members', each in order of arrival;
//     one whose client hung up is closed unread;
//   - while a connection that could be served waits, the gate tightens the
//     deadlines of served connections that are not working (waiting for a
//     member's first request, idle between two, or sending a body) and
//     closes those past them, and answers close their connection; a
//     waiting root or admin connection at once takes the slot of a
//     member's that is not working (for root, an admin's that served a
//     request already too).
//
// A connection is working from the moment its request was read whole
// until its answer is written: it is never cut short. Nor is one with
// bytes from its client waiting in the socket: the server is slow to read
// them, not the client to send.

// ConnLimits are the gate's limits.
type ConnLimits struct {
	Served     int // connections served at once
	Reserved   int // of Served, for root and socket.admin-group only
	PeerServed int // served at once for one member's uid
	PeerOpen   int // open (served or waiting) for one member's uid
	Waiting    int // waiting connections in all, root's included
	// Deadlines while a connection that could be served waits: a member's
	// new connection's first request's headers, a request's body, an idle
	// keep-alive connection's next request (a member's, root's or an
	// admin's). Without pressure the API server's own (10 s, 30 s, 60 s).
	Header, Body, IdleMember, IdlePrivileged time.Duration
	// Sweep is how often waiting connections are checked (hung up?) and
	// tight deadlines enforced, while any wait.
	Sweep time.Duration
	// Refusing refusals are answered at once, each given RefuseRead to
	// send its request; past that a refused connection is closed unanswered.
	Refusing   int
	RefuseRead time.Duration
}

// DefaultConnLimits are vgpud's.
func DefaultConnLimits() ConnLimits {
	return ConnLimits{Served: 64, Reserved: 16, PeerServed: 8, PeerOpen: 32, Waiting: 1024,
		Header: 2 * time.Second, Body: 2 * time.Second, IdleMember: 0, IdlePrivileged: time.Second,
		Sweep: 100 * time.Millisecond, Refusing: 64, RefuseRead: 500 * time.Millisecond}
}

// peerClass orders who is served first.
type peerClass int

const (
	classRoot   peerClass = iota // uid 0: the hook, systemd, the admin's sudo
	classAdmin                   // a member of socket.admin-group
	classMember                  // may only read
)

func (c peerClass) String() string { return [...]string{"root", "admin", "member"}[c] }

// connPhase is where an API connection is.
type connPhase int

const (
	phaseWaiting connPhase = iota // accepted, waits for a slot
	phaseRequest                  // served, waits for a request (its first, or the next: idle)
	phaseBody                     // the request's headers are in, its body is being read
	phaseWorking                  // the request is read whole: the handler works and answers
	phaseDone                     // closed, shed or dropped: its slot is free
)

// apiConn is an accepted API connection with its peer.
type apiConn struct {
	net.Conn
	peer    Peer
	peerErr error
	class   peerClass
	uid     int // the key of its peer's quota (-1: unknown peer)
	fd      int // for polling while it waits (only the gate closes it then)
	g       *gate

	// Guarded by g.mu.
	phase  connPhase
	since  time.Time // when phase began
	fresh  bool      // no request served on it yet
	queued *list.Element
}

func (c *apiConn) Close() error {
	err := c.Conn.Close()
	c.g.release(c)
	return err
}

// control runs f on c's descriptor and reports whether it could: not
// once the connection is closed.
func (c *apiConn) control(f func(fd int)) bool {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	return err == nil && rc.Control(func(fd uintptr) { f(int(fd)) }) == nil
}

// hungUp reports whether the client closed its end (or shut down its
// writing, which the HTTP server takes as a hang-up too).
func (c *apiConn) hungUp() bool {
	gone := true
	c.control(func(fd int) { gone = pollHungUp([]int{fd})[0] })
	return gone
}

// pending reports whether bytes from the client wait unread in the
// socket: then the server has not read them yet, and c is not slow.
func (c *apiConn) pending() bool {
	n := 0
	c.control(func(fd int) { n, _ = unix.IoctlGetInt(fd, unix.SIOCINQ) })
	return n > 0
}

// pollHungUp polls fds once, without waiting: which hung up.
func pollHungUp(fds []int) []bool {
	pfds := make([]unix.PollFd, len(fds))
	for i, fd := range fds {
		pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLRDHUP}
	}
	out := make([]bool, len(fds))
	for {
		if _, err := unix.Poll(pfds, 0); err == nil {
			break
		} else if !errors.Is(err, unix.EINTR) {
			return out
		}
	}
	for i, p := range pfds {
		out[i] = p.Revents&(unix.POLLHUP|unix.POLLRDHUP|unix.POLLERR|unix.POLLNVAL) != 0
	}
	return out
}

// quota is one uid's connections.
type quota struct{ open, served int }

// gate is the API's listener: http.Server takes the connections it serves.
type gate struct {
	ln       net.Listener
	lim      ConnLimits
	cred     func(net.Conn) (Peer, error)
	classify func(Peer) peerClass
	log      *slog.Logger

	ready    chan *apiConn // admitted, for http.Server's Accept
	done     chan struct{}
	closer   sync.Once
	failed   chan struct{} // the listener failed: err
	err      error
	kick     chan struct{} // wakes the sweeper
	refusers chan struct{}

	mu      sync.Mutex
	closed  bool
	served  int
	members int // served connections of members
	peers   map[int]*quota
	live    map[*apiConn]struct{} // served
	queue   [3]*list.List         // waiting, by class
	stats   gateStats
}

// gateStats count what the gate turned away, for a log line at most
// every statsEvery.
type gateStats struct {
	refused, shed, dropped int
	byUID                  map[int]int // refused, by uid
	last                   time.Time
}

const statsEvery = 10 * time.Second

// newGate starts accepting on ln. cred says who is on the other end;
// classify sorts a peer into root, admin or member.
func newGate(ln net.Listener, lim ConnLimits, cred func(net.Conn) (Peer, error), classify func(Peer) peerClass, log *slog.Logger) *gate {
	g := &gate{ln: ln, lim: lim, cred: cred, classify: classify, log: log,
		ready: make(chan *apiConn, lim.Served), done: make(chan struct{}), failed: make(chan struct{}),
		kick: make(chan struct{}, 1), refusers: make(chan struct{}, lim.Refusing),
		peers: map[int]*quota{}, live: map[*apiConn]struct{}{}, stats: gateStats{byUID: map[int]int{}, last: time.Now()}}
	for i := range g.queue {
		g.queue[i] = list.New()
	}
	go g.acceptLoop()
	go g.sweeper()
	return g
}

// Accept hands http.Server the next connection to serve.
func (g *gate) Accept() (net.Conn, error) {
	select {
	case c := <-g.ready:
		return c, nil
	case <-g.done:
		return nil, net.ErrClosed
	case <-g.failed:
		return nil, g.err
	}
}

func (g *gate) Addr() net.Addr { return g.ln.Addr() }

// Close stops accepting and closes the waiting connections; the served
// ones are the server's to finish.
func (g *gate) Close() error {
	var err error
	g.closer.Do(func() {
		close(g.done)
		err = g.ln.Close()
		g.mu.Lock()
		g.closed = true
		var waiting []*apiConn
		for _, q := range g.queue {
			for e := q.Front(); e != nil; e = e.Next() {
				waiting = append(waiting, e.Value.(*apiConn))
			}
		}
		g.mu.Unlock()
		for _, c := range waiting {
			_ = c.Close()
		}
	drain:
		for { // admitted, never taken by the server
			select {
			case c := <-g.ready:
				_ = c.Close()
			default:
				break drain
			}
		}
	})
	return err
}

// acceptLoop accepts continuously: nothing it does waits on a peer.
func (g *gate) acceptLoop() {
	var backoff time.Duration
	for {
		nc, err := g.ln.Accept()
		if err != nil {
			select {
			case <-g.done:
				return
			default:
			}
			if transientAcceptError(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				g.log.Warn("accept an API connection", "err", err, "retry in", backoff)
				time.Sleep(backoff)
				continue
			}
			g.err = fmt.Errorf("accept API connections: %w", err)
			close(g.failed)
			return
		}
		backoff = 0
		g.offer(nc)
	}
}

// transientAcceptError: out of descriptors or memory, or a connection
// that went before it was accepted.
func transientAcceptError(err error) bool {
	for _, e := range []error{unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM, unix.ECONNABORTED, unix.EINTR, unix.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// offer classifies a new connection and serves, queues or refuses it.
func (g *gate) offer(nc net.Conn) {
	c := &apiConn{Conn: nc, g: g, uid: -1, fd: -1}
	c.peer, c.peerErr = g.cred(nc)
	c.class = classMember
	if c.peerErr == nil {
		c.uid = c.peer.UID
		c.class = g.classify(c.peer)
	}
	c.control(func(fd int) { c.fd = fd })
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		_ = nc.Close()
		return
	}
	q := g.peers[c.uid]
	if c.class == classMember && q != nil && q.open >= g.lim.PeerOpen {
		g.noteRefusedLocked(c.uid)
		open := q.open
		g.mu.Unlock()
		g.refuse(c, http.StatusTooManyRequests, api.KindTooMany, fmt.Sprintf(
			"%s has %d connections open to vgpud, the most one user who may only read may (%d served at once); close some, or wait for them to end",
			c.who(), open, g.lim.PeerServed))
		return
	}
	fits := g.fitsLocked(c)
	if !fits && g.waitingLocked() >= g.lim.Waiting {
		g.noteRefusedLocked(c.uid)
		g.mu.Unlock()
		g.refuse(c, http.StatusServiceUnavailable, api.KindBusy, fmt.Sprintf(
			"vgpud has %d connections waiting to be served, the most it keeps; try again", g.lim.Waiting))
		return
	}
	if q == nil {
		q = &quota{}
		g.peers[c.uid] = q
	}
	q.open++
	if fits {
		g.serveLocked(c)
		g.mu.Unlock()
		return
	}
	c.phase, c.since = phaseWaiting, time.Now()
	c.queued = g.queue[c.class].PushBack(c)
	g.log.Debug("API connection waits for a slot", "peer", c.who(), "class", c.class.String(), "served", g.served)
	g.makeRoomLocked(c)
	g.mu.Unlock()
	g.wake()
}

func (c *apiConn) who() string {
	if c.peerErr != nil {
		return "a peer vgpud cannot name"
	}
	return c.peer.String()
}

// fitsLocked reports whether c can be served now.
func (g *gate) fitsLocked(c *apiConn) bool {
	if g.served >= g.lim.Served {
		return false
	}
	if c.class != classMember {
		return true
	}
	if g.members >= g.lim.Served-g.lim.Reserved {
		return false
	}
	q := g.peers[c.uid]
	return q == nil || q.served < g.lim.PeerServed
}

// eligibleLocked reports whether waiting c is held back only by others'
// connections, not by its own uid's quota: it puts the gate under pressure.
func (g *gate) eligibleLocked(c *apiConn) bool {
	if c.class != classMember {
		return true
	}
	q := g.peers[c.uid]
	return q == nil || q.served < g.lim.PeerServed
}

func (g *gate) waitingLocked() int {
	n := 0
	for _, q := range g.queue {
		n += q.Len()
	}
	return n
}

func (g *gate) serveLocked(c *apiConn) {
	c.phase, c.since, c.fresh = phaseRequest, time.Now(), true
	g.served++
	if c.class == classMember {
		g.members++
	}
	g.peers[c.uid].served++
	g.live[c] = struct{}{}
	g.ready <- c // never blocks: it holds at most Served
}

// release frees c's slot or place in the queue; only the first call counts.
func (g *gate) release(c *apiConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.forgetLocked(c) {
		g.admitLocked()
	}
}

// forgetLocked takes c out of the gate's counts; false if it was already.
func (g *gate) forgetLocked(c *apiConn) bool {
	switch c.phase {
	case phaseDone:
		return false
	case phaseWaiting:
		g.queue[c.class].Remove(c.queued)
		c.queued = nil
	default:
		g.served--
		if c.class == classMember {
			g.members--
		}
		g.peers[c.uid].served--
		delete(g.live, c)
	}
	c.phase = phaseDone
	if q := g.peers[c.uid]; q != nil {
		if q.open--; q.open == 0 {
			delete(g.peers, c.uid)
		}
	}
	return true
}

// admitLocked serves waiting connections while they fit: root's first,
// then the admins', then the members'; one whose client hung up is
// dropped unread.
func (g *gate) admitLocked() {
	if g.closed {
		return
	}
	for _, q := range g.queue {
		for e := q.Front(); e != nil && g.served < g.lim.Served; {
			c := e.Value.(*apiConn)
			e = e.Next()
			if !g.fitsLocked(c) {
				continue
			}
			if g.waiterHungUpLocked(c) {
				continue
			}
			q.Remove(c.queued)
			c.queued = nil
			g.serveLocked(c)
		}
	}
}

// waiterHungUpLocked drops waiting c if its client hung up.
func (g *gate) waiterHungUpLocked(c *apiConn) bool {
	if c.fd < 0 || !pollHungUp([]int{c.fd})[0] {
		return false
	}
	g.dropLocked(c)
	return true
}

// dropLocked closes waiting c unread: its client is gone.
func (g *gate) dropLocked(c *apiConn) {
	g.forgetLocked(c)
	_ = c.Conn.Close()
	g.stats.dropped++
	g.log.Info("dropped a waiting API connection unread: its client hung up", "peer", c.who(), "waited", time.Since(c.since).Round(time.Millisecond))
}

// makeRoomLocked gives waiting root or admin connection w the slot of a
// connection that is not working: a member's first (the oldest), then,
// for root, an admin's, then an idle one of root's or an admin's past
// IdlePrivileged.
func (g *gate) makeRoomLocked(w *apiConn) {
	if w.class == classMember || g.served < g.lim.Served {
		return
	}
	now := time.Now()
	rank := func(c *apiConn) int { // lower goes first; -1 never
		switch {
		case c.phase == phaseWorking:
			return -1
		case c.class == classMember:
			return 0
		case c.class == classAdmin && w.class == classRoot && !c.fresh:
			return 1
		case c.phase == phaseRequest && !c.fresh && now.Sub(c.since) >= g.lim.IdlePrivileged:
			return 2
		}
		return -1
	}
	var victim *apiConn
	best := -1
	for c := range g.live {
		r := rank(c)
		if r < 0 || victim != nil && (r > best || r == best && !c.since.Before(victim.since)) || c.pending() {
			continue
		}
		victim, best = c, r
	}
	if victim != nil {
		g.shedLocked(victim, "a root or admin connection needs its slot")
		g.admitLocked()
	}
}

// shedLocked closes served c, which is not working, and frees its slot.
func (g *gate) shedLocked(c *apiConn, why string) {
	phase := c.phase
	g.forgetLocked(c)
	_ = c.Conn.Close() // its server goroutine ends on the error
	g.stats.shed++
	g.log.Debug("shed an API connection", "peer", c.who(), "phase", phaseName(phase), "for", time.Since(c.since).Round(time.Millisecond), "why", why)
}

func phaseName(p connPhase) string {
	return [...]string{"waiting", "request", "body", "working", "done"}[p]
}

// pressureLocked reports whether a connection that could be served waits.
func (g *gate) pressureLocked() bool {
	for _, q := range g.queue {
		for e := q.Front(); e != nil; e = e.Next() {
			if g.eligibleLocked(e.Value.(*apiConn)) {
				return true
			}
		}
	}
	return false
}

// Pressure reports whether a connection that could be served waits: an
// answer then closes its connection, so that the next one is served.
func (g *gate) Pressure() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pressureLocked()
}

// tightLimit is how long c may stay in its phase under pressure.
func (g *gate) tightLimit(c *apiConn) (time.Duration, bool) {
	switch {
	case c.phase == phaseBody:
		return g.lim.Body, true
	case c.phase != phaseRequest:
		return 0, false
	case c.fresh && c.class != classMember:
		// Root's and the admins' clients are trusted: one that connected
		// and was starved before it could write its request must not lose
		// it. The server's own header deadline holds.
		return 0, false
	case c.fresh:
		return g.lim.Header, true
	case c.class == classMember:
		return g.lim.IdleMember, true
	}
	return g.lim.IdlePrivileged, true
}

// setPhase moves served c to phase (the HTTP server's and the handler's
// view of it).
func (g *gate) setPhase(c *apiConn, p connPhase) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.phase == phaseWaiting || c.phase == phaseDone || c.phase == p {
		return
	}
	if p == phaseRequest {
		c.fresh = false
	}
	c.phase, c.since = p, time.Now()
}

// connState follows http.Server's view of each connection.
func (g *gate) connState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*apiConn)
	if !ok {
		return
	}
	switch s {
	case http.StateActive:
		g.setPhase(c, phaseBody)
	case http.StateIdle:
		g.setPhase(c, phaseRequest)
		if g.Pressure() {
			g.wake()
		}
	case http.StateClosed, http.StateHijacked:
		g.release(c)
	}
}

func (g *gate) wake() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// sweeper, while connections wait: drops those whose client hung up,
// sheds served ones past their tight deadline, and serves who fits.
func (g *gate) sweeper() {
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-g.done:
			t.Stop()
			return
		case <-g.kick:
		case <-t.C:
		}
		g.mu.Lock()
		g.sweepLocked(time.Now())
		waiting := g.waitingLocked() > 0
		g.logStatsLocked(false)
		g.mu.Unlock()
		if waiting {
			t.Reset(g.lim.Sweep)
		}
	}
}

func (g *gate) sweepLocked(now time.Time) {
	var waiting []*apiConn
	var fds []int
	for _, q := range g.queue {
		for e := q.Front(); e != nil; e = e.Next() {
			if c := e.Value.(*apiConn); c.fd >= 0 {
				waiting, fds = append(waiting, c), append(fds, c.fd)
			}
		}
	}
	if len(fds) > 0 {
		for i, gone := range pollHungUp(fds) {
			if gone {
				g.dropLocked(waiting[i])
			}
		}
	}
	if g.pressureLocked() {
		var late []*apiConn
		for c := range g.live {
			if lim, ok := g.tightLimit(c); ok && now.Sub(c.since) >= lim && !c.pending() {
				late = append(late, c)
			}
		}
		for _, c := range late {
			g.shedLocked(c, "connections wait, and it is past its deadline under pressure")
		}
	}
	g.admitLocked()
}

func (g *gate) noteRefusedLocked(uid int) {
	g.stats.refused++
	g.stats.byUID[uid]++
	g.logStatsLocked(false)
}

// logStatsLocked logs what the gate turned away since the last line, at
// most every statsEvery (all when force).
func (g *gate) logStatsLocked(force bool) {
	s := &g.stats
	if s.refused+s.shed+s.dropped == 0 || !force && time.Since(s.last) < statsEvery {
		return
	}
	g.log.Warn("API connections turned away", "refused", s.refused, "refusedByUID", fmt.Sprint(s.byUID), "shed", s.shed,
		"droppedHungUp", s.dropped, "since", s.last.UTC().Format(time.RFC3339))
	*s = gateStats{byUID: map[int]int{}, last: time.Now()}
}

// refuse answers c's request with status and closes it; with too many
// refusals under way it closes c unanswered.
func (g *gate) refuse(c *apiConn, status int, kind, msg string) {
	select {
	case g.refusers <- struct{}{}:
	default:
		_ = c.Conn.Close()
		return
	}
	go func() {
		defer func() { <-g.refusers }()
		defer c.Conn.Close()
		// Read the request first: a client answered before it wrote may
		// take the answer for a stray one. Headers only, bounded.
		_ = c.Conn.SetDeadline(time.Now().Add(g.lim.RefuseRead))
		if _, err := http.ReadRequest(bufio.NewReaderSize(io.LimitReader(c.Conn, 16<<10), 4<<10)); err != nil {
			return
		}
		body, _ := json.Marshal(api.Error{Error: msg, Kind: kind})
		body = append(body, '\n')
		_, _ = fmt.Fprintf(c.Conn, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
			status, http.StatusText(status), len(body), body)
	}()
}
