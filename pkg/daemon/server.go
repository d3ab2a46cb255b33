package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"path"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vgpu-project/vgpu/internal/change"
	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/api/convert"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/mdevctl"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// httpError is an answer decided by the handler (validation).
type httpError struct {
	status int
	body   api.Error
}

func (e *httpError) Error() string { return e.body.Error }

func badRequest(field, format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, body: api.Error{Error: fmt.Sprintf(format, args...), Field: field, Kind: api.KindBadRequest}}
}

// Handler is the API: every route of pkg/api, plus /metrics. Requests are
// validated before anything is written; a panic answers 500.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	h := &handlers{d: d, e: d.engine}
	routes := []struct {
		method, path string
		fn           func(http.ResponseWriter, *http.Request) (any, error)
	}{
		{http.MethodGet, api.PathHealth, h.health},
		{http.MethodGet, api.PathGPUs, h.gpus},
		{http.MethodGet, api.PathVGPUs, h.vgpus},
		{http.MethodGet, api.PathAllocations, h.allocations},
		{http.MethodGet, api.PathConfig, h.config},
		{http.MethodPost, api.PathReconcile, h.reconcile},
		{http.MethodPost, api.PathApply, h.apply},
		{http.MethodGet, api.PathAssert, h.assertRunning},
		{http.MethodPost, api.PathAssert, h.assertGiven},
		{http.MethodPost, api.PathCarve, h.carve},
		{http.MethodPost, api.PathUncarve, h.uncarve},
		{http.MethodPost, "/v1/domains/{uuid}/reservations", h.reserve},
		{http.MethodDelete, "/v1/domains/{uuid}/reservations", h.unreserve},
		{http.MethodPost, "/v1/domains/{uuid}/prepare", h.prepare},
		{http.MethodPost, "/v1/domains/{uuid}/release", h.release},
		{http.MethodPost, "/v1/domains/{uuid}/leases", h.lease},
		{http.MethodDelete, "/v1/domains/{uuid}/leases", h.dropLeases},
		{http.MethodPost, "/v1/domains/{uuid}/free", h.free},
		{http.MethodPost, "/v1/domains/{uuid}/migration", h.migration},
	}
	paths := map[string][]string{}
	for _, r := range routes {
		mux.Handle(r.method+" "+r.path, h.json(r.fn))
		paths[r.path] = append(paths[r.path], r.method)
	}
	// The same paths with any other method: 405 in JSON, with Allow.
	for p, methods := range paths {
		allow := strings.Join(methods, ", ")
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, &httpError{status: http.StatusMethodNotAllowed, body: api.Error{
				Error: fmt.Sprintf("%s %s: method not allowed; allowed: %s", r.Method, r.URL.Path, allow), Kind: api.KindBadRequest}})
		})
	}
	mux.Handle("GET "+api.PathMetrics, d.engine.Metrics().Handler())
	noRoute := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &httpError{status: http.StatusNotFound, body: api.Error{
			Error: fmt.Sprintf("no route %s %s (the API is versioned: /%s/...)", r.Method, r.URL.Path, api.Version), Kind: api.KindNotFound}})
	}
	mux.HandleFunc("/", noRoute)
	// ServeMux answers a path with "." or ".." or empty segments with a
	// redirect to its cleaned form (307): the API never redirects, and no
	// route has such a path, so it is a 404 like any other unknown path.
	return d.middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cleanPath(r.URL.EscapedPath()) {
			noRoute(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

// cleanPath reports whether p is a path ServeMux would not redirect: as
// path.Clean leaves it, but for a trailing slash.
func cleanPath(p string) bool {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// statusWriter remembers the status for logs and metrics, and closes the
// connection with the answer when closeIf says so.
type statusWriter struct {
	http.ResponseWriter
	status  int
	closeIf func() bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if w.closeIf != nil && w.closeIf() {
			w.Header().Set("Connection", "close")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (Flush).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// bodyWatch calls done once the request's body has been read to its end.
type bodyWatch struct {
	io.ReadCloser
	done func()
	once sync.Once
}

func (b *bodyWatch) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.done)
	}
	return n, err
}

// statusClientGone is the status logged for a request whose client hung
// up before its change began (nginx's 499): nothing was changed for it.
const statusClientGone = 499

// tieToConnection ties a request to its connection. The gate learns when the
// request has been read whole (the connection is working from then on,
// never shed) and, under pressure, the answer closes the connection so
// that a waiting one is served. A change runs in change.Bind's context:
// a hang-up stops it until it begins (change.Begin), and no longer after.
func tieToConnection(sw *statusWriter, r *http.Request) *http.Request {
	c := connOf(r)
	var alive func() bool
	if c != nil {
		sw.closeIf = c.g.Pressure
		working := func() { c.g.setPhase(c, phaseWorking) }
		if r.Body == nil || r.Body == http.NoBody {
			working()
		} else {
			r.Body = &bodyWatch{ReadCloser: r.Body, done: working}
		}
		alive = func() bool { return !c.hungUp() }
	}
	if mutates(r) {
		r = r.WithContext(change.Bind(r.Context(), alive))
	}
	return r
}

// middleware recovers panics (500 with a message, the stack in the log),
// refuses requests while stopping, and times and logs every request.
func (d *Daemon) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		r = tieToConnection(sw, r)
		defer func() {
			if p := recover(); p != nil {
				d.log.Error("API handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				if sw.status == 0 {
					writeError(sw, &httpError{status: http.StatusInternalServerError, body: api.Error{
						Error: fmt.Sprintf("internal error handling %s %s: %v (see vgpud's log)", r.Method, r.URL.Path, p), Kind: api.KindInternal}})
				}
			}
			route := r.Pattern
			if route == "" {
				route = "unmatched"
			}
			d.engine.Metrics().Request(route, methodLabel(r.Method), sw.status, time.Since(start))
			level := slog.LevelDebug
			switch {
			case sw.status == statusClientGone:
				level = slog.LevelInfo
			case sw.status >= 500:
				level = slog.LevelError
			case sw.status >= 400:
				level = slog.LevelWarn
			}
			d.log.Log(r.Context(), level, "api request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
				"took", time.Since(start).Round(time.Microsecond))
		}()
		if d.stopping.Load() {
			writeError(sw, &httpError{status: http.StatusServiceUnavailable, body: api.Error{Error: "vgpud is stopping", Kind: api.KindStopping}})
			return
		}
		if he := d.authorize(r); he != nil {
			d.log.Warn("API change refused", "method", r.Method, "path", r.URL.Path, "err", he.body.Error)
			writeError(sw, he)
			return
		}
		next.ServeHTTP(sw, r)
	})
}

type handlers struct {
	d *Daemon
	e *engine.Engine
}

// json adapts a handler returning (value, error) to HTTP. A change whose
// client hung up before it began is answered 499 (for the log: no one
// reads it); one the handler can undo (onUnanswered) is undone when its
// answer cannot reach its client.
func (h *handlers) json(fn func(http.ResponseWriter, *http.Request) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ans := &answer{}
		r = r.WithContext(context.WithValue(r.Context(), answerKey{}, ans))
		v, err := fn(w, r)
		switch {
		case change.Abandoned(r.Context()):
			h.d.log.Info("API change dropped: its client hung up before it began; nothing was changed", "method", r.Method, "path", r.URL.Path)
			writeError(w, &httpError{status: statusClientGone, body: api.Error{
				Error: fmt.Sprintf("%s %s: %v", r.Method, r.URL.Path, change.ErrClientGone), Kind: api.KindClientGone}})
		case err != nil:
			writeError(w, err)
		case ans.undo != nil:
			h.deliver(w, r, v, ans.undo)
		default:
			writeJSON(w, http.StatusOK, v)
		}
	})
}

type answerKey struct{}

// answer holds what to do should a change's answer not reach its client.
type answer struct{ undo func(context.Context) error }

// onUnanswered has undo run if r's answer cannot be delivered: its client
// hung up after the change and before the answer reached its socket.
func onUnanswered(r *http.Request, undo func(context.Context) error) {
	if a, ok := r.Context().Value(answerKey{}).(*answer); ok {
		a.undo = undo
	}
}

// deliver answers v, or undoes the change when the client is gone: found
// hung up before the answer is written, or the write fails. An answer
// that reached the client's socket counts as delivered.
func (h *handlers) deliver(w http.ResponseWriter, r *http.Request, v any, undo func(context.Context) error) {
	undone := func() {
		if err := undo(context.WithoutCancel(r.Context())); err != nil {
			h.d.log.Error("undo a change whose client hung up before its answer", "method", r.Method, "path", r.URL.Path, "err", err)
		}
	}
	if c := connOf(r); c != nil && c.hungUp() {
		undone()
		writeError(w, &httpError{status: statusClientGone, body: api.Error{
			Error: fmt.Sprintf("%s %s: the client hung up before the answer; the change was undone", r.Method, r.URL.Path), Kind: api.KindClientGone}})
		return
	}
	writeJSON(w, http.StatusOK, v)
	if err := http.NewResponseController(w).Flush(); err != nil {
		undone()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode the answer failed","kind":"internal"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, err error) {
	he := toHTTPError(err)
	writeJSON(w, he.status, he.body)
}

// toHTTPError maps an error to its status by the sentinels it matches.
func toHTTPError(err error) *httpError {
	var he *httpError
	if errors.As(err, &he) {
		return he
	}
	e := func(status int, kind, field string) *httpError {
		return &httpError{status: status, body: api.Error{Error: err.Error(), Kind: kind, Field: field}}
	}
	var inUse *carve.InUseError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &httpError{status: http.StatusRequestEntityTooLarge, body: api.Error{
			Error: fmt.Sprintf("request body larger than %d bytes", mbe.Limit), Kind: api.KindBadRequest}}
	case errors.As(err, &inUse):
		r := e(http.StatusConflict, api.KindInUse, "")
		r.body.Blocked = convert.Blockers(inUse.Blocked)
		return r
	case errors.Is(err, carve.ErrUndo):
		return e(http.StatusInternalServerError, api.KindPartial, "")
	case errors.Is(err, engine.ErrPending):
		return e(http.StatusAccepted, api.KindPending, "")
	case errors.Is(err, alloc.ErrBadDomainUUID):
		return e(http.StatusBadRequest, api.KindBadRequest, "uuid")
	case errors.Is(err, alloc.ErrBadDomainName):
		return e(http.StatusBadRequest, api.KindBadRequest, "name")
	case errors.Is(err, alloc.ErrBadCount):
		return e(http.StatusBadRequest, api.KindBadRequest, "count")
	case errors.Is(err, alloc.ErrBadVGPU):
		return e(http.StatusBadRequest, api.KindBadRequest, "vgpus")
	case errors.Is(err, alloc.ErrUnknownProfile), errors.Is(err, profile.ErrWrongGPU), errors.Is(err, profile.ErrCannotSplit):
		return e(http.StatusBadRequest, api.KindBadRequest, "profile")
	case errors.Is(err, alloc.ErrInvalid), errors.Is(err, inventory.ErrIsVF), errors.Is(err, mdevctl.ErrAutostart):
		return e(http.StatusBadRequest, api.KindBadRequest, "")
	case errors.Is(err, config.ErrInvalid), errors.Is(err, config.ErrNoSuchGPU), errors.Is(err, config.ErrConflict):
		return e(http.StatusBadRequest, api.KindBadRequest, "config")
	case errors.Is(err, alloc.ErrNoCapacity):
		return e(http.StatusConflict, api.KindNoCapacity, "")
	case errors.Is(err, alloc.ErrAttached), errors.Is(err, carve.ErrGroupShared), errors.Is(err, carve.ErrHostConsole):
		return e(http.StatusConflict, api.KindInUse, "")
	case errors.Is(err, alloc.ErrConflict), errors.Is(err, engine.ErrChanging):
		return e(http.StatusConflict, api.KindConflict, "")
	case errors.Is(err, alloc.ErrNotAllocated), errors.Is(err, alloc.ErrNoSuchVGPU),
		errors.Is(err, inventory.ErrNotGPU), errors.Is(err, pci.ErrNoDevice), errors.Is(err, mdev.ErrNoParent):
		return e(http.StatusNotFound, api.KindNotFound, "")
	}
	return e(http.StatusInternalServerError, api.KindInternal, "")
}

// decode reads a JSON body strictly: one object, no unknown fields, at most
// api.MaxBodyBytes. optional lets an empty body through as the zero value.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return &httpError{status: http.StatusUnsupportedMediaType, body: api.Error{
				Error: fmt.Sprintf("Content-Type %q: the API takes application/json", ct), Kind: api.KindBadRequest}}
		}
	}
	body := http.MaxBytesReader(w, r.Body, api.MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	// The body is read whole first: a JSON null would decode into v as
	// nothing at all, and the request would go on with v's zero value.
	var raw json.RawMessage
	err := dec.Decode(&raw)
	if err == nil {
		if raw[0] != '{' {
			return badRequest("", "request body is %s; want a JSON object", jsonKind(raw))
		}
		obj := json.NewDecoder(bytes.NewReader(raw))
		obj.DisallowUnknownFields()
		err = obj.Decode(v)
	}
	if err != nil {
		var mbe *http.MaxBytesError
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			return err
		case errors.Is(err, io.EOF):
			if optional {
				return nil
			}
			return badRequest("", "empty request body; want a JSON object")
		case errors.As(err, &se):
			return badRequest("", "request body is not JSON: %v (at byte %d)", err, se.Offset)
		case errors.As(err, &te):
			return badRequest(te.Field, "field %s: %s is not a %s", te.Field, te.Value, te.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return badRequest(f, "unknown field %q", f)
		}
		return badRequest("", "request body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return badRequest("", "request body has more than one JSON value")
	}
	return nil
}

// jsonKind names the kind of the JSON value raw: "null", "an array".
func jsonKind(raw json.RawMessage) string {
	switch raw[0] {
	case 'n':
		return "null"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}

// body refuses query parameters and decodes the JSON body into v.
func body(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	if _, err := query(r); err != nil {
		return err
	}
	return decode(w, r, v, optional)
}

// domainBody is body for a domain route, and returns its UUID.
func domainBody(w http.ResponseWriter, r *http.Request, v any, optional bool) (string, error) {
	u, err := domainUUID(r)
	if err != nil {
		return "", err
	}
	return u, body(w, r, v, optional)
}

// query allows only the named query parameters, each at most once.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("", "bad query string: %v", err)
	}
	for k, vs := range q {
		if !slices.Contains(allowed, k) {
			return nil, badRequest(k, "unknown query parameter %q", k)
		}
		if len(vs) > 1 {
			return nil, badRequest(k, "query parameter %q given %d times", k, len(vs))
		}
	}
	return q, nil
}

// domainUUID validates the path's domain UUID.
func domainUUID(r *http.Request) (string, error) {
	u, err := alloc.DomainUUID(r.PathValue("uuid"))
	if err != nil {
		return "", badRequest("uuid", "%v", err)
	}
	return u, nil
}

func (h *handlers) checkName(name string) error {
	if err := alloc.DomainName(name); err != nil {
		return badRequest("name", "%v", err)
	}
	return nil
}

func (h *handlers) checkProfile(name string) error {
	if name == "" {
		return badRequest("profile", "no profile given; vgpuctl profiles lists them")
	}
	if _, ok := h.e.Catalog().Get(name); !ok {
		return badRequest("profile", "unknown profile %q; vgpuctl profiles lists them", name)
	}
	return nil
}

func checkCount(n int) error {
	if n < 1 || n > alloc.MaxCount {
		return badRequest("count", "count %d is out of range; allowed: 1 to %d", n, alloc.MaxCount)
	}
	return nil
}

func checkNUMA(n *int) error {
	if n != nil && (*n < 0 || *n > 1023) {
		return badRequest("numaNode", "NUMA node %d is out of range; allowed: 0 to 1023, or leave it out", *n)
	}
	return nil
}

// mutation is the context of the request's change (tieToConnection binds it):
// the client's until the change begins, so that one whose client hung up
// while it waited is never made; detached from then on, so that a hang-up
// cannot cut a change short between two kernel writes.
func mutation(r *http.Request) context.Context { return r.Context() }

func (h *handlers) health(_ http.ResponseWriter, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	return h.d.health(), nil
}

func (h *handlers) gpus(_ http.ResponseWriter, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	return h.e.GPUs(r.Context())
}

func (h *handlers) vgpus(w http.ResponseWriter, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	vs, warning, err := h.e.VGPUs(r.Context())
	if warning != "" {
		w.Header().Set(api.HeaderWarning, api.Warning(warning))
	}
	return vs, err
}

func (h *handlers) allocations(_ http.ResponseWriter, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	return h.e.Holdings(r.Context(), "")
}

func (h *handlers) config(_ http.ResponseWriter, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	return convert.Config(h.e.Config()), nil
}

func (h *handlers) reconcile(w http.ResponseWriter, r *http.Request) (any, error) {
	var empty struct{}
	if err := body(w, r, &empty, true); err != nil {
		return nil, err
	}
	return h.e.Reconcile(mutation(r), engine.ReasonAPI), nil
}

func (h *handlers) apply(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.ApplyRequest
	if err := body(w, r, &req, false); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.Config) == "" {
		return nil, badRequest("config", "no config given; want the YAML of a host config (docs/config.md)")
	}
	// Who may connect is root's to change: an admin-group member's apply
	// may carve, not open the socket or metrics to others.
	if p, ok, _ := peerOf(r); ok && !p.Root() && !req.DryRun {
		if cfg, err := config.Parse(h.d.opts.ConfigPath, []byte(req.Config)); err == nil && runtimeChanged(h.e.Config(), cfg) {
			return nil, &httpError{status: http.StatusForbidden, body: api.Error{
				Error: fmt.Sprintf("apply: %s may not change socket or metrics (who may connect); only root may", p), Kind: api.KindForbidden}}
		}
	}
	return h.d.Apply(mutation(r), req.Source, []byte(req.Config), req.DryRun)
}

func (h *handlers) assertRunning(_ http.ResponseWriter, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	return h.e.Assert(r.Context(), nil), nil
}

func (h *handlers) assertGiven(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.AssertRequest
	if err := body(w, r, &req, false); err != nil {
		return nil, err
	}
	source := req.Source
	if source == "" {
		source = "the config in the request"
	}
	cfg, err := config.Parse(source, []byte(req.Config))
	if err != nil {
		return nil, badRequest("config", "%v", err)
	}
	return h.e.Assert(r.Context(), cfg), nil
}

func parseGPU(s string) (pci.Address, error) {
	if s == "" {
		return pci.Address{}, badRequest("gpu", "no GPU given; want its PCI address, e.g. 0000:03:00.0")
	}
	a, err := pci.ParseAddress(s)
	if err != nil {
		return a, badRequest("gpu", "%v", err)
	}
	return a, nil
}

// parseTarget reads a carve's target from a request's two fields: a GPU
// by address, or a virtual mdev parent by name (vgpu.ParseParent).
func parseTarget(gpu, parent string) (vgpu.Target, error) {
	switch {
	case gpu != "" && parent != "":
		return vgpu.Target{}, badRequest("parent", "both gpu %s and parent %s given; want one", gpu, parent)
	case parent == "":
		a, err := parseGPU(gpu)
		return vgpu.GPU(a), err
	}
	t, err := vgpu.ParseParent(parent)
	if err != nil {
		return t, badRequest("parent", "%v", err)
	}
	return t, nil
}

func (h *handlers) carve(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.CarveRequest
	if err := body(w, r, &req, false); err != nil {
		return nil, err
	}
	t, err := parseTarget(req.GPU, req.Parent)
	if err != nil {
		return nil, err
	}
	if err := h.checkProfile(req.Profile); err != nil {
		return nil, err
	}
	opt := carve.Options{Force: req.Force, DryRun: req.DryRun}
	res, err := h.e.Carve(mutation(r), t, req.Profile, opt)
	return convert.CarveResult(res, req.DryRun), err
}

func (h *handlers) uncarve(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.UncarveRequest
	if err := body(w, r, &req, false); err != nil {
		return nil, err
	}
	t, err := parseTarget(req.GPU, req.Parent)
	if err != nil {
		return nil, err
	}
	opt := carve.Options{Force: req.Force, DryRun: req.DryRun}
	res, err := h.e.Uncarve(mutation(r), t, opt)
	return convert.CarveResult(res, req.DryRun), err
}

func (h *handlers) reserve(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.ReserveRequest
	u, err := domainBody(w, r, &req, false)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(h.checkName(req.Name), h.checkProfile(req.Profile), checkCount(req.Count), checkNUMA(req.NUMANode)); err != nil {
		return nil, first(err)
	}
	res, granted, err := h.e.ReserveGranted(mutation(r), alloc.Request{Profile: req.Profile, Count: req.Count, NUMANode: req.NUMANode,
		DomainUUID: u, DomainName: req.Name})
	if err == nil && len(granted) > 0 {
		// A reservation is the ledger alone: one its caller never heard of
		// is taken back rather than left held for no one.
		onUnanswered(r, func(ctx context.Context) error {
			_, err := h.e.Revoke(ctx, granted)
			return err
		})
	}
	return res, err
}

func (h *handlers) unreserve(_ http.ResponseWriter, r *http.Request) (any, error) {
	u, err := domainUUID(r)
	if err != nil {
		return nil, err
	}
	q, err := query(r, "vgpu")
	if err != nil {
		return nil, err
	}
	vgpu := q.Get("vgpu")
	if q.Has("vgpu") {
		if vgpu, err = alloc.VGPUID(vgpu); err != nil {
			return nil, badRequest("vgpu", "%v", err)
		}
	}
	return h.e.Unreserve(mutation(r), u, vgpu)
}

func (h *handlers) prepare(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.PrepareRequest
	u, err := domainBody(w, r, &req, false)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(h.checkName(req.Name), h.checkProfile(req.Profile)); err != nil {
		return nil, first(err)
	}
	if len(req.VGPUs) == 0 || len(req.VGPUs) > alloc.MaxCount {
		return nil, badRequest("vgpus", "%d vGPUs named; want 1 to %d ids from the domain XML", len(req.VGPUs), alloc.MaxCount)
	}
	seen := map[string]int{}
	for i, id := range req.VGPUs {
		c, err := alloc.VGPUID(id)
		if err != nil {
			return nil, badRequest(fmt.Sprintf("vgpus[%d]", i), "%v", err)
		}
		if j, dup := seen[c]; dup {
			return nil, badRequest(fmt.Sprintf("vgpus[%d]", i), "vGPU %s is named twice (vgpus[%d] too)", c, j)
		}
		seen[c] = i
	}
	if req.Count != 0 && req.Count != len(req.VGPUs) {
		return nil, badRequest("count", "count %d does not match the %d vGPUs named", req.Count, len(req.VGPUs))
	}
	return h.e.Prepare(mutation(r), alloc.Request{Profile: req.Profile, Count: len(req.VGPUs), DomainUUID: u, DomainName: req.Name}, req.VGPUs)
}

func (h *handlers) release(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.ReleaseRequest
	u, err := domainBody(w, r, &req, true)
	if err != nil {
		return nil, err
	}
	if req.Name != "" {
		if err := h.checkName(req.Name); err != nil {
			return nil, err
		}
	}
	return h.e.Release(mutation(r), u)
}

func (h *handlers) lease(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.LeaseRequest
	u, err := domainBody(w, r, &req, false)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(h.checkName(req.Name), h.checkProfile(req.Profile), checkCount(req.Count), checkNUMA(req.NUMANode)); err != nil {
		return nil, first(err)
	}
	if req.TTLSeconds < 1 || req.TTLSeconds > api.MaxTTLSeconds {
		return nil, badRequest("ttlSeconds", "ttlSeconds %d is out of range; allowed: 1 to %d", req.TTLSeconds, api.MaxTTLSeconds)
	}
	return h.e.Lease(mutation(r), alloc.Request{Profile: req.Profile, Count: req.Count, NUMANode: req.NUMANode,
		DomainUUID: u, DomainName: req.Name}, time.Duration(req.TTLSeconds)*time.Second, req.DryRun)
}

func (h *handlers) dropLeases(_ http.ResponseWriter, r *http.Request) (any, error) {
	u, err := domainUUID(r)
	if err != nil {
		return nil, err
	}
	if _, err := query(r); err != nil {
		return nil, err
	}
	return h.e.DropLeases(mutation(r), u)
}

func (h *handlers) free(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.FreeRequest
	u, err := domainBody(w, r, &req, true)
	if err != nil {
		return nil, err
	}
	return h.e.Free(mutation(r), u, req.Force)
}

func (h *handlers) migration(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.MigrationRequest
	u, err := domainBody(w, r, &req, false)
	if err != nil {
		return nil, err
	}
	switch req.Phase {
	case api.MigrationBegin, api.MigrationCommit, api.MigrationRollback:
	default:
		return nil, badRequest("phase", "phase %q: want %s, %s or %s", req.Phase, api.MigrationBegin, api.MigrationCommit, api.MigrationRollback)
	}
	return h.e.Migration(mutation(r), u, req.Phase)
}

// first is the first of joined validation errors: one field at a time.
func first(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 0 {
		return j.Unwrap()[0]
	}
	return err
}
