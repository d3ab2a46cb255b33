package fusefs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/vgpu-project/vgpu/internal/unixhttp"
)

// Client talks to a vgpusim control socket.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client for the control socket at socket.
func NewClient(socket string) *Client {
	return &Client{socket: socket, hc: unixhttp.NewClient(socket)}
}

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	req, err := unixhttp.NewJSONRequest(ctx, method, "http://vgpusim", path, in)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s on control socket %s: %w", method, path, c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read reply to %s %s from %s: %w", method, path, c.socket, err)
	}
	if resp.StatusCode >= 300 {
		var e apiError
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s %s: %s", method, path, e.Error)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode reply to %s %s: %w", method, path, err)
		}
	}
	return nil
}

// Status asks which mount and host the simulator serves.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	err := c.do(ctx, http.MethodGet, "/", nil, &s)
	return s, err
}

// Inject arms a fault or a hold.
func (c *Client) Inject(ctx context.Context, f FaultRequest) (FaultReply, error) {
	var r FaultReply
	err := c.do(ctx, http.MethodPost, "/faults", f, &r)
	return r, err
}

// ClearFaults disarms every fault and lets held writes reach the kernel.
func (c *Client) ClearFaults(ctx context.Context) (released int, err error) {
	var r ReleaseReply
	err = c.do(ctx, http.MethodDelete, "/faults", nil, &r)
	return r.Released, err
}

// Release frees held writes (see ReleaseRequest).
func (c *Client) Release(ctx context.Context, r ReleaseRequest) (released int, err error) {
	var out ReleaseReply
	err = c.do(ctx, http.MethodPost, "/release", r, &out)
	return out.Released, err
}

// Holds lists the armed holds.
func (c *Client) Holds(ctx context.Context) ([]HoldState, error) {
	var out []HoldState
	err := c.do(ctx, http.MethodGet, "/holds", nil, &out)
	return out, err
}

// Writes reports how many writes reached the attribute at path.
func (c *Client) Writes(ctx context.Context, path string) (int, error) {
	var n Count
	err := c.do(ctx, http.MethodGet, "/writes?path="+url.QueryEscape(path), nil, &n)
	return n.Count, err
}

// Opens reports the open handles on the device node at path.
func (c *Client) Opens(ctx context.Context, path string) (int, error) {
	var n Count
	err := c.do(ctx, http.MethodGet, "/opens?path="+url.QueryEscape(path), nil, &n)
	return n.Count, err
}

// SetFDsUnreadable hides the open files of process pid from readers of
// /proc (readlink EACCES), or shows them again.
func (c *Client) SetFDsUnreadable(ctx context.Context, pid int, unreadable bool) error {
	return c.do(ctx, http.MethodPost, "/procs", ProcRequest{PID: pid, Unreadable: unreadable}, nil)
}
