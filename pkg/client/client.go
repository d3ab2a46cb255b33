package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/vgpu-project/vgpu/internal/unixhttp"
	"github.com/vgpu-project/vgpu/pkg/api"
)

// Sentinels an *Error matches by its kind (or, failing that, its status).
var (
	// ErrBadRequest: the request is invalid (400, 413, 415); nothing was changed.
	ErrBadRequest = errors.New("bad request")
	// ErrForbidden: the caller may only read (403); changes need root or
	// vgpud's admin group.
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound: no such GPU, vGPU or route (404).
	ErrNotFound = errors.New("not found")
	// ErrInUse: refused, it would destroy or free a vGPU in use (409).
	ErrInUse = errors.New("in use")
	// ErrNoCapacity: not enough free vGPUs of the profile (409).
	ErrNoCapacity = errors.New("no capacity")
	// ErrConflict: held by another domain, or the domain holds more than asked (409).
	ErrConflict = errors.New("conflict")
	// ErrPartial: a step failed and so did its undo; reconcile repairs (500).
	ErrPartial = errors.New("partly changed")
	// ErrUnavailable: vgpud does not answer on the socket (not running?),
	// or went away under a question; nothing was changed.
	ErrUnavailable = errors.New("vgpud unavailable")
	// ErrGone: vgpud took a change and closed the connection before its
	// whole answer (it died or was stopped): the change may be done, partly
	// done or not begun, and vgpud's next start repairs or finishes it.
	ErrGone = errors.New("vgpud went away")
	// ErrPending: a forced change still waits for a VM to let go of a vGPU
	// and goes on in vgpud (202).
	ErrPending = errors.New("pending")
	// ErrBusy: vgpud refused the connection: the caller's user has as
	// many open as one user may (429), or too many wait (503).
	ErrBusy = errors.New("vgpud busy")
)

// Error is an error answer from vgpud.
type Error struct {
	Method, Path string
	Status       int
	// Body is vgpud's answer: message, field, kind, blockers.
	Body api.Error
}

func (e *Error) Error() string {
	if e.Body.Field != "" && !strings.Contains(e.Body.Error, e.Body.Field) {
		return e.Body.Field + ": " + e.Body.Error
	}
	return e.Body.Error
}

// Unwrap gives the sentinel of the kind.
func (e *Error) Unwrap() error {
	switch e.Body.Kind {
	case api.KindBadRequest:
		return ErrBadRequest
	case api.KindNotFound:
		return ErrNotFound
	case api.KindInUse:
		return ErrInUse
	case api.KindNoCapacity:
		return ErrNoCapacity
	case api.KindConflict:
		return ErrConflict
	case api.KindPartial:
		return ErrPartial
	case api.KindStopping:
		return ErrUnavailable
	case api.KindForbidden:
		return ErrForbidden
	case api.KindPending:
		return ErrPending
	case api.KindTooMany, api.KindBusy:
		return ErrBusy
	}
	switch {
	case e.Status == http.StatusNotFound:
		return ErrNotFound
	case e.Status == http.StatusConflict:
		return ErrConflict
	case e.Status >= 400 && e.Status < 500:
		return ErrBadRequest
	}
	return nil
}

// Client talks to one vgpud. It is safe for concurrent use.
type Client struct {
	socket string
	hc     *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithTimeout bounds each call (default: none; use the context).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.hc.Timeout = d } }

// New returns a client of the vgpud listening on socketPath ("" means
// api.DefaultSocket). It does not connect until a call.
func New(socketPath string, opts ...Option) *Client {
	if socketPath == "" {
		socketPath = api.DefaultSocket
	}
	c := &Client{socket: socketPath, hc: unixhttp.NewClient(socketPath)}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Socket is the socket's path.
func (c *Client) Socket() string { return c.socket }

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Available reports whether a vgpud answers on the socket within timeout.
func (c *Client) Available(ctx context.Context, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.Health(ctx)
	return err == nil
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	_, err := c.doHeader(ctx, method, path, in, out)
	return err
}

// doHeader is do that also returns the answer's header.
func (c *Client) doHeader(ctx context.Context, method, path string, in, out any) (http.Header, error) {
	req, err := unixhttp.NewJSONRequest(ctx, method, "http://vgpud", path, in)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil && ctx.Err() == nil && closedIdle(err) {
		// vgpud closed the kept-alive connection before this request
		// reached it (it does so to idle connections while others wait
		// for a slot): nothing was done; send it again.
		if req, err = unixhttp.NewJSONRequest(ctx, method, "http://vgpud", path, in); err != nil {
			return nil, err
		}
		resp, err = c.hc.Do(req)
	}
	if err != nil {
		if ctx.Err() == nil && (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)) {
			return nil, fmt.Errorf("%s %s on %s: %w: %w (is vgpud running?)", method, path, c.socket, ErrUnavailable, err)
		}
		if ctx.Err() == nil && cutShort(err) {
			return nil, c.gone(method, path, err)
		}
		return nil, fmt.Errorf("%s %s on %s: %w", method, path, c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		if ctx.Err() == nil && cutShort(err) {
			return nil, c.gone(method, path, err)
		}
		return nil, fmt.Errorf("read the answer to %s %s from %s: %w", method, path, c.socket, err)
	}
	if resp.StatusCode >= 300 || resp.StatusCode == http.StatusAccepted {
		e := &Error{Method: method, Path: path, Status: resp.StatusCode}
		if json.Unmarshal(data, &e.Body) != nil || e.Body.Error == "" {
			e.Body = api.Error{Error: fmt.Sprintf("%s %s: %s", method, path, resp.Status)}
		}
		return nil, e
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("decode the answer to %s %s: %w", method, path, err)
		}
	}
	return resp.Header, nil
}

// cutShort reports whether err says the connection closed under a request
// vgpud had taken: before its answer, or in the middle of it.
func cutShort(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// gone is the error of a call vgpud did not live to answer. A question
// changed nothing (ErrUnavailable); a change may have been made in part
// (ErrGone), and vgpud's start repairs it from its ledger's intent and
// reconciles the host.
func (c *Client) gone(method, path string, err error) error {
	if method == http.MethodGet {
		return fmt.Errorf("%s %s on %s: %w: vgpud went away before its whole answer came (%w); nothing was changed: ask again once it is back (systemctl status vgpud)",
			method, path, c.socket, ErrUnavailable, err)
	}
	return fmt.Errorf("%s %s on %s: %w during the change, before its whole answer came (%w): the change may be done, partly done or not begun; "+
		"vgpud repairs or finishes what was cut short when it starts again (systemd restarts it) and reconciles the host to its config: "+
		"check with vgpuctl vgpus once it is back (systemctl status vgpud)", method, path, c.socket, ErrGone, err)
}

// closedIdle reports whether err is net/http's "server closed idle
// connection": the server closed a kept-alive connection before the
// request was sent on it (the transport retries that itself only for
// requests it may repeat, such as GET). net/http does not export it.
func closedIdle(err error) bool {
	return strings.Contains(err.Error(), "http: server closed idle connection")
}

// Health asks whether vgpud is up.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var h api.Health
	return h, c.do(ctx, http.MethodGet, api.PathHealth, nil, &h)
}

// GPUs lists the host's GPUs.
func (c *Client) GPUs(ctx context.Context) ([]api.GPU, error) {
	var out []api.GPU
	return out, c.do(ctx, http.MethodGet, api.PathGPUs, nil, &out)
}

// VGPUs lists the host's vGPUs with their holders.
func (c *Client) VGPUs(ctx context.Context) ([]api.VGPU, error) {
	out, _, err := c.VGPUsWarning(ctx)
	return out, err
}

// VGPUsWarning is VGPUs with what vgpud could not tell: why some vGPUs'
// use is unknown ("" when it knows every one's).
func (c *Client) VGPUsWarning(ctx context.Context) ([]api.VGPU, string, error) {
	var out []api.VGPU
	h, err := c.doHeader(ctx, http.MethodGet, api.PathVGPUs, nil, &out)
	if err != nil {
		return nil, "", err
	}
	return out, api.ParseWarning(h.Get(api.HeaderWarning)), nil
}

// Allocations lists every allocation and live lease.
func (c *Client) Allocations(ctx context.Context) (api.Holdings, error) {
	var out api.Holdings
	return out, c.do(ctx, http.MethodGet, api.PathAllocations, nil, &out)
}

// Config returns the config vgpud runs with.
func (c *Client) Config(ctx context.Context) (api.Config, error) {
	var out api.Config
	return out, c.do(ctx, http.MethodGet, api.PathConfig, nil, &out)
}

// Reconcile brings the host to vgpud's config now.
func (c *Client) Reconcile(ctx context.Context) (api.ReconcileReport, error) {
	var out api.ReconcileReport
	return out, c.do(ctx, http.MethodPost, api.PathReconcile, struct{}{}, &out)
}

// Apply makes yaml vgpud's host config and reconciles to it.
func (c *Client) Apply(ctx context.Context, yaml []byte, dryRun bool) (api.ReconcileReport, error) {
	return c.ApplyFile(ctx, "", yaml, dryRun)
}

// ApplyFile is Apply of yaml read from source, which vgpud's messages name.
func (c *Client) ApplyFile(ctx context.Context, source string, yaml []byte, dryRun bool) (api.ReconcileReport, error) {
	var out api.ReconcileReport
	return out, c.do(ctx, http.MethodPost, api.PathApply, api.ApplyRequest{Config: string(yaml), DryRun: dryRun, Source: source}, &out)
}

// Assert compares the host with yaml, or with vgpud's own config when yaml
// is nil.
func (c *Client) Assert(ctx context.Context, yaml []byte) (api.AssertReport, error) {
	return c.AssertFile(ctx, "", yaml)
}

// AssertFile is Assert of yaml read from source, which vgpud's messages name.
func (c *Client) AssertFile(ctx context.Context, source string, yaml []byte) (api.AssertReport, error) {
	var out api.AssertReport
	if yaml == nil {
		return out, c.do(ctx, http.MethodGet, api.PathAssert, nil, &out)
	}
	return out, c.do(ctx, http.MethodPost, api.PathAssert, api.AssertRequest{Config: string(yaml), Source: source}, &out)
}

// Carve carves a GPU through vgpud.
func (c *Client) Carve(ctx context.Context, r api.CarveRequest) (api.CarveResult, error) {
	var out api.CarveResult
	return out, c.do(ctx, http.MethodPost, api.PathCarve, r, &out)
}

// Uncarve uncarves a GPU through vgpud.
func (c *Client) Uncarve(ctx context.Context, r api.UncarveRequest) (api.CarveResult, error) {
	var out api.CarveResult
	return out, c.do(ctx, http.MethodPost, api.PathUncarve, r, &out)
}

// Reserve reserves vGPUs for a domain (vgpuctl attach).
func (c *Client) Reserve(ctx context.Context, domainUUID string, r api.ReserveRequest) (api.Holdings, error) {
	var out api.Holdings
	return out, c.do(ctx, http.MethodPost, api.ReservationsPath(domainUUID), r, &out)
}

// Unreserve frees the domain's vGPUs, or only vgpu when it is not ""
// (vgpuctl detach). An attached one its VM still holds open is refused
// (ErrInUse); one the running VM let go of (a --live detach) is freed.
func (c *Client) Unreserve(ctx context.Context, domainUUID, vgpu string) (api.Holdings, error) {
	var out api.Holdings
	p := api.ReservationsPath(domainUUID)
	if vgpu != "" {
		p += "?vgpu=" + url.QueryEscape(vgpu)
	}
	return out, c.do(ctx, http.MethodDelete, p, nil, &out)
}

// Free frees everything the domain holds (vgpuctl release); without force
// it is refused (ErrInUse) while the domain runs.
func (c *Client) Free(ctx context.Context, domainUUID string, force bool) (api.Holdings, error) {
	var out api.Holdings
	return out, c.do(ctx, http.MethodPost, api.FreePath(domainUUID), api.FreeRequest{Force: force}, &out)
}

// Migration moves the source's record of a domain migrating out through
// phase (api.MigrationBegin, Commit, Rollback).
func (c *Client) Migration(ctx context.Context, domainUUID, phase string) (api.Holdings, error) {
	var out api.Holdings
	return out, c.do(ctx, http.MethodPost, api.MigrationPath(domainUUID), api.MigrationRequest{Phase: phase}, &out)
}

// Prepare makes the domain's vGPUs ready and attached (hook prepare/begin).
func (c *Client) Prepare(ctx context.Context, domainUUID string, r api.PrepareRequest) (api.Holdings, error) {
	var out api.Holdings
	return out, c.do(ctx, http.MethodPost, api.PreparePath(domainUUID), r, &out)
}

// Release tells vgpud the domain's VM stopped (hook release/end).
func (c *Client) Release(ctx context.Context, domainUUID string, r api.ReleaseRequest) (api.ReleaseResult, error) {
	var out api.ReleaseResult
	return out, c.do(ctx, http.MethodPost, api.ReleasePath(domainUUID), r, &out)
}

// Lease holds vGPUs for a domain migrating in (hook migrate/begin).
func (c *Client) Lease(ctx context.Context, domainUUID string, r api.LeaseRequest) (api.Holdings, error) {
	var out api.Holdings
	return out, c.do(ctx, http.MethodPost, api.LeasesPath(domainUUID), r, &out)
}

// DropLeases drops the domain's leases: its migration failed.
func (c *Client) DropLeases(ctx context.Context, domainUUID string) (api.Holdings, error) {
	var out api.Holdings
	return out, c.do(ctx, http.MethodDelete, api.LeasesPath(domainUUID), nil, &out)
}
