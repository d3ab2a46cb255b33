package nvstaterpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/vgpu-project/vgpu/internal/unixhttp"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// request is one call: the GPU and the method's other arguments.
type request struct {
	GPU       string         `json:"gpu"`
	On        bool           `json:"on,omitempty"`
	ProfileID int            `json:"profileID,omitempty"`
	Start     *int           `json:"start,omitempty"`
	ID        int            `json:"id,omitempty"`
	Sched     *nvstate.Sched `json:"sched,omitempty"`
}

// reply is a call's result, or its error with the sentinel it wraps.
type reply struct {
	Mode      *nvstate.Mode      `json:"mode,omitempty"`
	Instances []nvstate.Instance `json:"instances,omitempty"`
	Instance  *nvstate.Instance  `json:"instance,omitempty"`
	Types     []nvstate.VGPUType `json:"types,omitempty"`
	Sizes     *nvstate.Sizes     `json:"sizes,omitempty"`
	Sched     *nvstate.Sched     `json:"sched,omitempty"`
	On        bool               `json:"on,omitempty"`
	Virt      *nvstate.Virt      `json:"virt,omitempty"`
	Error     string             `json:"error,omitempty"`
	Kind      string             `json:"kind,omitempty"`
}

// sentinels are the errors a call's error keeps across the socket, by
// the kind named on the wire.
func sentinels() map[string]error {
	return map[string]error{
		"unavailable": nvstate.ErrUnavailable,
		"pending":     nvstate.ErrPending,
		"in-use":      nvstate.ErrInUse,
		"no-room":     nvstate.ErrNoRoom,
		"unsupported": nvstate.ErrNotSupported,
	}
}

func kindOf(err error) string {
	for k, s := range sentinels() {
		if errors.Is(err, s) {
			return k
		}
	}
	return ""
}

// Handler serves m: POST /<method> with a request, answered by a reply.
func Handler(m nvstate.Manager) http.Handler {
	calls := map[string]func(pci.Address, request, *reply) error{
		"mode": func(a pci.Address, _ request, r *reply) error {
			md, err := m.Mode(a)
			r.Mode = &md
			return err
		},
		"set-mode": func(a pci.Address, q request, _ *reply) error { return m.SetMode(a, q.On) },
		"instances": func(a pci.Address, _ request, r *reply) (err error) {
			r.Instances, err = m.Instances(a)
			return err
		},
		"create": func(a pci.Address, q request, r *reply) error {
			in, err := m.Create(a, q.ProfileID, q.Start)
			r.Instance = &in
			return err
		},
		"destroy": func(a pci.Address, q request, _ *reply) error { return m.Destroy(a, q.ID) },
		"sizes": func(a pci.Address, _ request, r *reply) error {
			sz, err := m.Sizes(a)
			r.Sizes = &sz
			return err
		},
		"vgpu-types": func(a pci.Address, _ request, r *reply) (err error) {
			r.Types, err = m.VGPUTypes(a)
			return err
		},
		"scheduler": func(a pci.Address, _ request, r *reply) error {
			s, err := m.Scheduler(a)
			r.Sched = &s
			return err
		},
		"set-scheduler": func(a pci.Address, q request, _ *reply) error {
			if q.Sched == nil {
				return errors.New("set-scheduler without a scheduler")
			}
			return m.SetScheduler(a, *q.Sched)
		},
		"mixed-size": func(a pci.Address, _ request, r *reply) (err error) {
			r.On, err = m.MixedSize(a)
			return err
		},
		"set-mixed-size": func(a pci.Address, q request, _ *reply) error { return m.SetMixedSize(a, q.On) },
		"virtualization": func(a pci.Address, _ request, r *reply) error {
			v, err := m.Virtualization(a)
			r.Virt = &v
			return err
		},
	}
	mux := http.NewServeMux()
	for name, call := range calls {
		mux.HandleFunc("POST /"+name, func(w http.ResponseWriter, r *http.Request) {
			var q request
			if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
				http.Error(w, fmt.Sprintf("decode %s request: %v", name, err), http.StatusBadRequest)
				return
			}
			a, err := pci.ParseAddress(q.GPU)
			if err != nil {
				http.Error(w, fmt.Sprintf("%s: %v", name, err), http.StatusBadRequest)
				return
			}
			var rep reply
			if err := call(a, q, &rep); err != nil {
				rep = reply{Error: err.Error(), Kind: kindOf(err)}
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(rep)
		})
	}
	return mux
}

// Client is a nvstate.Manager served by Handler: on a unix socket (Dial) or by
// a helper process (Exec, Helper).
type Client struct {
	what    string // says whose NVML it is, in errors
	http    *http.Client
	timeout time.Duration
}

var _ nvstate.Manager = (*Client)(nil)

// Dial returns a Client of the socket at sock; it connects per call.
func Dial(sock string) *Client {
	return &Client{what: "the simulated host's NVML at " + sock, http: unixhttp.NewClient(sock), timeout: callTimeout}
}

// callTimeout bounds one call: the fake answers at once, and a carve must
// not hang on a simulated host that went away.
const callTimeout = 30 * time.Second

func (c *Client) call(gpu pci.Address, method string, q request) (reply, error) {
	q.GPU = gpu.String()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	req, err := unixhttp.NewJSONRequest(ctx, http.MethodPost, "http://nvml", "/"+method, q)
	if err != nil {
		return reply{}, err
	}
	resp, err := c.http.Do(req)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err
	}
	if se := (startError{}); errors.As(err, &se) {
		return reply{}, fmt.Errorf("GPU %s: %s: %w: %w", gpu, method, nvstate.ErrUnavailable, err)
	} else if err != nil {
		return reply{}, fmt.Errorf("GPU %s: %s: %w: %s does not answer: %w", gpu, method, nvstate.ErrUnavailable, c.what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return reply{}, fmt.Errorf("GPU %s: %s: %s answered %s", gpu, method, c.what, resp.Status)
	}
	var r reply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return reply{}, fmt.Errorf("GPU %s: %s: read the answer of %s: %w", gpu, method, c.what, err)
	}
	if r.Error != "" {
		if s := sentinels()[r.Kind]; s != nil {
			return r, remoteError{msg: r.Error, sentinel: s}
		}
		return r, errors.New(r.Error)
	}
	return r, nil
}

// remoteError is the server's message, still matching its sentinel.
type remoteError struct {
	msg      string
	sentinel error
}

func (e remoteError) Error() string { return e.msg }
func (e remoteError) Unwrap() error { return e.sentinel }

// orZero is what a reply's optional field holds, or the zero value where
// the reply has none (an error's).
func orZero[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func (c *Client) Mode(gpu pci.Address) (nvstate.Mode, error) {
	r, err := c.call(gpu, "mode", request{})
	return orZero(r.Mode), err
}

func (c *Client) SetMode(gpu pci.Address, on bool) error {
	_, err := c.call(gpu, "set-mode", request{On: on})
	return err
}

func (c *Client) Instances(gpu pci.Address) ([]nvstate.Instance, error) {
	r, err := c.call(gpu, "instances", request{})
	return r.Instances, err
}

func (c *Client) Create(gpu pci.Address, profileID int, start *int) (nvstate.Instance, error) {
	r, err := c.call(gpu, "create", request{ProfileID: profileID, Start: start})
	return orZero(r.Instance), err
}

func (c *Client) Destroy(gpu pci.Address, id int) error {
	_, err := c.call(gpu, "destroy", request{ID: id})
	return err
}

func (c *Client) Sizes(gpu pci.Address) (nvstate.Sizes, error) {
	r, err := c.call(gpu, "sizes", request{})
	return orZero(r.Sizes), err
}

func (c *Client) VGPUTypes(gpu pci.Address) ([]nvstate.VGPUType, error) {
	r, err := c.call(gpu, "vgpu-types", request{})
	return r.Types, err
}

func (c *Client) Scheduler(gpu pci.Address) (nvstate.Sched, error) {
	r, err := c.call(gpu, "scheduler", request{})
	return orZero(r.Sched), err
}

func (c *Client) SetScheduler(gpu pci.Address, s nvstate.Sched) error {
	_, err := c.call(gpu, "set-scheduler", request{Sched: &s})
	return err
}

func (c *Client) MixedSize(gpu pci.Address) (bool, error) {
	r, err := c.call(gpu, "mixed-size", request{})
	return r.On, err
}

func (c *Client) SetMixedSize(gpu pci.Address, on bool) error {
	_, err := c.call(gpu, "set-mixed-size", request{On: on})
	return err
}

func (c *Client) Virtualization(gpu pci.Address) (nvstate.Virt, error) {
	r, err := c.call(gpu, "virtualization", request{})
	return orZero(r.Virt), err
}

// Open returns the Manager for a host whose sys/ and dev/ are under root:
// a simulated host's NVML when root holds nvstate.SimSocket, else NVIDIA's
// NVML (library, "" for libnvidia-ml.so.1 from the library path) in
// vgpu-nvml (Helper).
func Open(root, library string) nvstate.Manager {
	if root != "" && root != "/" {
		sock := filepath.Join(root, nvstate.SimSocket)
		if _, err := os.Stat(sock); err == nil {
			return Dial(sock)
		}
	}
	return Helper(library)
}
