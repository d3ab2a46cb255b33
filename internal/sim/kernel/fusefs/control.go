package fusefs

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
)

// The control API, HTTP/JSON on a unix socket (vgpusim serve --control):
//
//	GET    /                     Status
//	POST   /faults               FaultRequest -> FaultReply
//	DELETE /faults               clear every fault; release held writes (to the kernel)
//	DELETE /faults/{kind}/{id}   clear one fault or hold (a hold's writes go on)
//	GET    /holds                []HoldState
//	POST   /release              ReleaseRequest -> ReleaseReply
//	GET    /writes?path=P        Count: writes that reached the attribute at P
//	GET    /opens?path=P         Count: open handles on the device node P
//	POST   /procs                ProcRequest: hide a process's open files from readers
//
// Errors answer 400 (bad request) or 404 with {"error": "..."}.

// Fault kinds.
const (
	KindFail = "fail" // the write fails with Errno and has no effect
	KindHold = "hold" // the write waits until released (see Hold)
)

// FaultRequest arms a fault. Errno is a name ("EBUSY") or number; empty
// means EIO. Nth is 1-based from now; 0 means 1.
type FaultRequest struct {
	Kind   string `json:"kind,omitempty"` // KindFail (default) or KindHold
	Path   string `json:"path"`
	Nth    int    `json:"nth,omitempty"`
	Errno  string `json:"errno,omitempty"`
	Always bool   `json:"always,omitempty"`
}

// FaultReply names the armed fault.
type FaultReply struct {
	Kind string `json:"kind"`
	ID   int    `json:"id"`
}

// ReleaseRequest frees held writes: those on Path, or all when it is
// empty. With Errno they fail without reaching the kernel.
type ReleaseRequest struct {
	Path  string `json:"path,omitempty"`
	Errno string `json:"errno,omitempty"`
}

// ReleaseReply says how many writes were waiting.
type ReleaseReply struct {
	Released int `json:"released"`
}

// Count answers /writes and /opens.
type Count struct {
	Path  string `json:"path"`
	Count int    `json:"count"`
}

// ProcRequest makes the open files of process PID unreadable through
// /proc (readlink EACCES, as for a reader without CAP_SYS_PTRACE), or
// readable again.
type ProcRequest struct {
	PID        int  `json:"pid"`
	Unreadable bool `json:"unreadable"`
}

// Status answers GET /.
type Status struct {
	Mount string `json:"mount"`
	Host  string `json:"host,omitempty"`
}

type apiError struct {
	Error string `json:"error"`
}

// NewControl serves the control API for k mounted as m. host names the
// host description in Status.
func NewControl(k *simkernel.Kernel, m *Mount, host string) http.Handler {
	c := &control{k: k, m: m, host: host}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.status)
	mux.HandleFunc("POST /faults", c.inject)
	mux.HandleFunc("DELETE /faults", c.clear)
	mux.HandleFunc("DELETE /faults/{kind}/{id}", c.clearOne)
	mux.HandleFunc("GET /holds", c.holds)
	mux.HandleFunc("POST /release", c.release)
	mux.HandleFunc("GET /writes", c.count(k.Writes))
	mux.HandleFunc("GET /opens", c.count(k.OpenCount))
	mux.HandleFunc("POST /procs", c.procs)
	return mux
}

type control struct {
	k    *simkernel.Kernel
	m    *Mount
	host string
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, format string, args ...any) {
	reply(w, code, apiError{Error: fmt.Sprintf(format, args...)})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		fail(w, http.StatusBadRequest, "decode %s %s body: %v", r.Method, r.URL.Path, err)
		return false
	}
	return true
}

func (c *control) status(w http.ResponseWriter, _ *http.Request) {
	reply(w, http.StatusOK, Status{Mount: c.m.Dir(), Host: c.host})
}

func (c *control) inject(w http.ResponseWriter, r *http.Request) {
	var req FaultRequest
	if !decode(w, r, &req) {
		return
	}
	if !strings.HasPrefix(req.Path, "/") {
		fail(w, http.StatusBadRequest, "fault path %q: want an absolute host path like /sys/bus/pci/devices/0000:03:00.0/sriov_numvfs", req.Path)
		return
	}
	if req.Nth < 0 {
		fail(w, http.StatusBadRequest, "fault on %s: nth %d is negative", req.Path, req.Nth)
		return
	}
	switch req.Kind {
	case "", KindFail:
		errno, err := ParseErrno(req.Errno)
		if err != nil {
			fail(w, http.StatusBadRequest, "fault on %s: %v", req.Path, err)
			return
		}
		id := c.k.InjectFault(simkernel.Fault{Path: req.Path, Nth: req.Nth, Errno: errno, Always: req.Always})
		reply(w, http.StatusCreated, FaultReply{Kind: KindFail, ID: id})
	case KindHold:
		if req.Errno != "" {
			fail(w, http.StatusBadRequest, "hold on %s: errno belongs to the release, not the hold", req.Path)
			return
		}
		id := c.m.Holds().Add(Hold{Path: req.Path, Nth: req.Nth, Always: req.Always})
		reply(w, http.StatusCreated, FaultReply{Kind: KindHold, ID: id})
	default:
		fail(w, http.StatusBadRequest, "fault on %s: unknown kind %q (allowed: %s, %s)", req.Path, req.Kind, KindFail, KindHold)
	}
}

func (c *control) clear(w http.ResponseWriter, _ *http.Request) {
	c.k.ClearFaults()
	n := c.m.Holds().ReleaseAll(0)
	reply(w, http.StatusOK, ReleaseReply{Released: n})
}

func (c *control) clearOne(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil {
		fail(w, http.StatusBadRequest, "fault id %q: not a number", r.PathValue("id"))
		return
	}
	switch r.PathValue("kind") {
	case KindFail:
		c.k.ClearFault(id)
		reply(w, http.StatusOK, ReleaseReply{})
	case KindHold:
		reply(w, http.StatusOK, ReleaseReply{Released: c.m.Holds().ReleaseID(id, 0)})
	default:
		fail(w, http.StatusNotFound, "fault kind %q: allowed %s, %s", r.PathValue("kind"), KindFail, KindHold)
	}
}

func (c *control) holds(w http.ResponseWriter, _ *http.Request) {
	reply(w, http.StatusOK, c.m.Holds().List())
}

func (c *control) release(w http.ResponseWriter, r *http.Request) {
	var req ReleaseRequest
	if !decode(w, r, &req) {
		return
	}
	var errno syscall.Errno
	if req.Errno != "" {
		var err error
		if errno, err = ParseErrno(req.Errno); err != nil {
			fail(w, http.StatusBadRequest, "release %s: %v", req.Path, err)
			return
		}
	}
	reply(w, http.StatusOK, ReleaseReply{Released: c.m.Holds().Release(req.Path, errno)})
}

func (c *control) procs(w http.ResponseWriter, r *http.Request) {
	var req ProcRequest
	if !decode(w, r, &req) {
		return
	}
	if req.PID <= 0 {
		fail(w, http.StatusBadRequest, "procs: pid %d: want a process id", req.PID)
		return
	}
	c.k.SetFDsUnreadable(req.PID, req.Unreadable)
	reply(w, http.StatusOK, req)
}

func (c *control) count(get func(string) int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get("path")
		if !strings.HasPrefix(p, "/") {
			fail(w, http.StatusBadRequest, "%s: path=%q: want an absolute host path", r.URL.Path, p)
			return
		}
		reply(w, http.StatusOK, Count{Path: p, Count: get(p)})
	}
}

// ParseErrno reads an errno by name ("EBUSY", "ebusy") or number ("16");
// "" is EIO, the kernel fault's default.
func ParseErrno(s string) (syscall.Errno, error) {
	if s == "" {
		return syscall.EIO, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || unix.ErrnoName(syscall.Errno(n)) == "" {
			return 0, fmt.Errorf("errno %d: not a Linux errno", n)
		}
		return syscall.Errno(n), nil
	}
	name := strings.ToUpper(s)
	for e := syscall.Errno(1); e < 4096; e++ {
		if unix.ErrnoName(e) == name {
			return e, nil
		}
	}
	return 0, errors.New("errno " + strconv.Quote(s) + ": unknown name (use EIO, EBUSY, ENOSPC, ... or a number)")
}
