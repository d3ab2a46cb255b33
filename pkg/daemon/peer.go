package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/pkg/api"
)

// Peer is who is on the other end of an API connection, as the kernel
// says (SO_PEERCRED): never what the client claims.
type Peer struct {
	PID, UID, GID int
	Groups        []int // supplementary groups when it connected (SO_PEERGROUPS)
}

// Root reports a peer with uid 0.
func (p Peer) Root() bool { return p.UID == 0 }

// InGroup reports whether gid is the peer's group or one of its groups.
func (p Peer) InGroup(gid int) bool {
	if p.GID == gid {
		return true
	}
	for _, g := range p.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// String names the peer for logs and refusals.
func (p Peer) String() string { return fmt.Sprintf("uid %d (pid %d)", p.UID, p.PID) }

// peerCred reads the peer of a unix socket connection.
func peerCred(c net.Conn) (Peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, fmt.Errorf("read the peer of a %T: not a unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("read the peer of the API connection: %w", err)
	}
	var cred *unix.Ucred
	var cerr, gerr error
	var groups []int
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr == nil {
			groups, gerr = peerGroups(int(fd))
		}
	}); err != nil {
		return Peer{}, fmt.Errorf("read the peer of the API connection: %w", err)
	}
	if cerr != nil {
		return Peer{}, fmt.Errorf("read the peer of the API connection (SO_PEERCRED): %w", cerr)
	}
	p := Peer{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid), Groups: groups}
	if gerr != nil { // a kernel before 4.13
		p.Groups = procGroups(p.PID)
	}
	return p, nil
}

// peerGroups reads the supplementary groups the peer of the unix socket fd
// had when it connected (SO_PEERGROUPS, Linux 4.13), as SO_PEERCRED gives
// its uid and gid: one getsockopt, where /proc/<pid>/status cost an open,
// a read and a close for every connection (a quarter of vgpud's CPU under
// a member holding 2000 connections), and could name another process once
// the pid was reused.
func peerGroups(fd int) ([]int, error) {
	buf := make([]uint32, 64)
	for {
		n := uint32(4 * len(buf))
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		if e == unix.ERANGE && int(n/4) > len(buf) { // n is what it needs
			buf = make([]uint32, n/4)
			continue
		}
		if e != 0 {
			return nil, fmt.Errorf("getsockopt SO_PEERGROUPS: %w", e)
		}
		out := make([]int, n/4)
		for i, g := range buf[:n/4] {
			out[i] = int(g)
		}
		return out, nil
	}
}

// procGroups are a process's supplementary groups; none when it is gone.
// Only for kernels without SO_PEERGROUPS.
func procGroups(pid int) []int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Groups:"); ok {
			var out []int
			for _, f := range strings.Fields(v) {
				if g, err := strconv.Atoi(f); err == nil {
					out = append(out, g)
				}
			}
			return out
		}
	}
	return nil
}

type peerKey struct{}

// connContext puts the connection into every request's context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if ac, ok := c.(*apiConn); ok {
		return context.WithValue(ctx, peerKey{}, ac)
	}
	return ctx
}

// connOf is the request's connection; nil for one that did not come
// through the gate (a test serving Handler itself).
func connOf(r *http.Request) *apiConn {
	c, _ := r.Context().Value(peerKey{}).(*apiConn)
	return c
}

// peerOf is the request's peer; ok is false for a connection that did not
// come through the gate.
func peerOf(r *http.Request) (p Peer, ok bool, err error) {
	c := connOf(r)
	if c == nil {
		return Peer{}, false, nil
	}
	return c.peer, true, c.peerErr
}

// peerClass sorts a peer for the gate: root, a member of
// socket.admin-group, or a member who may only read. The admin group's
// gid is resolved once per config put in force (a SIGHUP resolves it
// again), not at every connection.
func (d *Daemon) peerClass(p Peer) peerClass {
	if p.Root() {
		return classRoot
	}
	name := d.engine.Config().Socket.AdminGroup
	if name == "" {
		return classMember
	}
	d.adminMu.Lock()
	if d.adminName != name || d.adminGen != d.generation.Load() {
		gid, err := d.opts.LookupGroup(name)
		d.adminName, d.adminGen, d.adminGID = name, d.generation.Load(), gid
		if err != nil {
			d.adminGID = -1
		}
	}
	gid := d.adminGID
	d.adminMu.Unlock()
	if gid >= 0 && p.InGroup(gid) {
		return classAdmin
	}
	return classMember
}

// mutates reports whether a request changes the host or the ledger: every
// POST and DELETE but POST /v1/assert, which only compares.
func mutates(r *http.Request) bool {
	switch r.Method {
	case http.MethodPost:
		return r.URL.Path != api.PathAssert
	case http.MethodDelete, http.MethodPut, http.MethodPatch:
		return true
	}
	return false
}

// authorize lets anyone who can connect read, and only root or a member of
// socket.admin-group change anything.
func (d *Daemon) authorize(r *http.Request) *httpError {
	if !mutates(r) {
		return nil
	}
	p, ok, err := peerOf(r)
	if !ok {
		return nil
	}
	if err != nil {
		return &httpError{status: http.StatusForbidden, body: api.Error{Error: fmt.Sprintf("%s %s: cannot tell who is asking: %v", r.Method, r.URL.Path, err), Kind: api.KindForbidden}}
	}
	if p.Root() {
		return nil
	}
	admin := d.engine.Config().Socket.AdminGroup
	if admin != "" {
		if gid, err := d.opts.LookupGroup(admin); err == nil && p.InGroup(gid) {
			return nil
		}
	}
	why := "socket.admin-group is not set"
	if admin != "" {
		why = "not a member of socket.admin-group " + admin
	}
	return &httpError{status: http.StatusForbidden, body: api.Error{
		Error: fmt.Sprintf("%s %s: %s may only read; changes need root or a member of the admin group (%s)", r.Method, r.URL.Path, p, why),
		Kind:  api.KindForbidden}}
}

// methodLabel is the method as the request metrics label it: any method
// but the standard ones counts as "other", so made-up methods cannot grow
// the series without bound.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}
