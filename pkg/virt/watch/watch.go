package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"github.com/google/uuid"
)

// ErrNotConnected: Domains was asked while no connection is up.
var ErrNotConnected = errors.New("not connected to libvirt")

// Sockets qemu:///system answers on, read-only: the monolithic libvirtd's
// and the modular virtqemud's, tried in that order as libvirt's own client
// does (remote_sockets.c: the monolithic daemon when its socket exists).
const (
	libvirtdSocketRO  = "/run/libvirt/libvirt-sock-ro"
	virtqemudSocketRO = "/run/libvirt/virtqemud-sock-ro"
)

// Monitor is vgpud's view of libvirt: which domains exist, and a signal on
// every domain lifecycle event. vgpud starts before libvirtd, so the
// Monitor connects when it can and reconnects when libvirtd restarts or
// stops answering; while it is not connected, Domains fails and the
// caller must not conclude anything from it.
type Monitor struct {
	uri     string
	name    string // what libvirtd is asked to open: qemu:///system
	sockets []string
	log     *slog.Logger
	retry   time.Duration
	// ping and pingWait stand for the C client's keepalive (5 s, 3
	// missed): a libvirtd that holds the socket but answers nothing.
	ping, pingWait time.Duration
	events         chan struct{}

	mu   sync.Mutex
	conn *golibvirt.Libvirt
}

// NewMonitor returns a Monitor of the local libvirt at uri: qemu:///system,
// optionally with ?socket=PATH (a read-only or admin socket of a libvirtd
// elsewhere, as libvirt's URIs take it). Run connects it.
func NewMonitor(uri string, log *slog.Logger) (*Monitor, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("libvirt URI %q: %w", uri, err)
	}
	if u.Scheme != "qemu" || u.Host != "" || u.Path != "/system" {
		return nil, fmt.Errorf("libvirt URI %q: vgpud watches the local system libvirt, qemu:///system (optionally ?socket=PATH)", uri)
	}
	m := &Monitor{uri: uri, name: "qemu:///system", log: log, retry: 5 * time.Second,
		ping: 5 * time.Second, pingWait: 15 * time.Second, events: make(chan struct{}, 1)}
	if s := u.Query().Get("socket"); s != "" {
		m.sockets = []string{s}
	} else {
		m.sockets = []string{libvirtdSocketRO, virtqemudSocketRO}
	}
	return m, nil
}

// Events receives a value after domain lifecycle events (coalesced) and
// after every (re)connection: the moments a caller should look again.
func (m *Monitor) Events() <-chan struct{} { return m.events }

func (m *Monitor) signal() {
	select {
	case m.events <- struct{}{}:
	default: // one pending wake-up covers several events
	}
}

// Domains returns every domain libvirt knows, defined or running, by
// lower-case UUID, with whether it runs.
func (m *Monitor) Domains(ctx context.Context) (map[string]bool, error) {
	m.mu.Lock()
	c := m.conn
	m.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("list the domains of %s: %w", m.uri, ErrNotConnected)
	}
	out := map[string]bool{}
	// Two lists, so that no domain needs a question of its own; a domain
	// that starts between them is in both, and running wins.
	for _, active := range []bool{false, true} {
		flags := golibvirt.ConnectListDomainsInactive
		if active {
			flags = golibvirt.ConnectListDomainsActive
		}
		ds, err := call(ctx, func() ([]golibvirt.Domain, error) {
			ds, _, err := c.ConnectListAllDomains(1, flags)
			return ds, err
		})
		if err != nil {
			return nil, fmt.Errorf("list the domains of %s: %w", m.uri, err)
		}
		for _, d := range ds {
			out[uuidString(d.UUID)] = out[uuidString(d.UUID)] || active
		}
	}
	return out, nil
}

// call runs f, a request go-libvirt cannot cancel, until ctx ends: then
// the request finishes on its own and its answer is dropped.
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// uuidString is u as Domains keys it: lower case, canonical.
func uuidString(u golibvirt.UUID) string {
	return uuid.UUID(u).String()
}

// Run keeps the connection until ctx ends: it connects, retries every few
// seconds while libvirtd is away, and reconnects when the connection
// closes (libvirtd restarted) or stops answering. It always returns nil.
func (m *Monitor) Run(ctx context.Context) error {
	logged := false
	for ctx.Err() == nil {
		c, events, err := m.connect(ctx)
		if err != nil {
			if !logged { // once per outage, not every retry
				m.log.Info("libvirt not reachable; retrying", "uri", m.uri, "err", err)
				logged = true
			}
			select {
			case <-ctx.Done():
			case <-time.After(m.retry):
			}
			continue
		}
		logged = false
		m.log.Info("watching libvirt's domains", "uri", m.uri)
		m.mu.Lock()
		m.conn = c
		m.mu.Unlock()
		m.signal()
		why := m.follow(ctx, c, events)
		m.mu.Lock()
		m.conn = nil
		m.mu.Unlock()
		if why != "" {
			m.log.Info("libvirt "+why+"; reconnecting", "uri", m.uri)
		}
		go m.disconnect(c)
	}
	return nil
}

// disconnect closes c, which asks libvirtd first: a libvirtd that stopped
// answering would hold the caller, so callers run it on its own.
func (m *Monitor) disconnect(c *golibvirt.Libvirt) {
	if err := c.Disconnect(); err != nil {
		m.log.Debug("close the libvirt connection", "uri", m.uri, "err", err)
	}
}

// follow signals each lifecycle event on c until ctx ends ("") or the
// connection is lost (why).
func (m *Monitor) follow(ctx context.Context, c *golibvirt.Libvirt, events <-chan golibvirt.DomainEventLifecycleMsg) string {
	tick := time.NewTicker(m.ping)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-c.Disconnected():
			return "connection closed"
		case _, ok := <-events:
			if !ok {
				return "event stream closed"
			}
			m.signal()
		case <-tick.C:
			pctx, cancel := context.WithTimeout(ctx, m.pingWait)
			_, err := call(pctx, func() (uint64, error) { return c.ConnectGetLibVersion() })
			cancel()
			if err != nil && ctx.Err() == nil {
				return fmt.Sprintf("did not answer for %s (%v)", m.pingWait, err)
			}
		}
	}
}

// connect opens a read-only connection on the first socket that exists
// and subscribes to lifecycle events until ctx ends.
func (m *Monitor) connect(ctx context.Context) (*golibvirt.Libvirt, <-chan golibvirt.DomainEventLifecycleMsg, error) {
	sock := ""
	for _, s := range m.sockets {
		if _, err := os.Stat(s); err == nil {
			sock = s
			break
		}
	}
	if sock == "" {
		return nil, nil, fmt.Errorf("connect to libvirt at %s: no socket at %s: %w", m.uri, strings.Join(m.sockets, " or "), os.ErrNotExist)
	}
	c := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(sock), dialers.WithLocalTimeout(5*time.Second)))
	// A failed ConnectToURI closes its socket itself; one that outlives
	// ctx is closed once it is done.
	done := make(chan error, 1)
	go func() { done <- c.ConnectToURI(golibvirt.ConnectURI(m.name)) }()
	select {
	case err := <-done:
		if err != nil {
			return nil, nil, fmt.Errorf("connect to libvirt at %s (%s): %w", m.uri, sock, err)
		}
	case <-ctx.Done():
		go func() {
			if <-done == nil {
				m.disconnect(c)
			}
		}()
		return nil, nil, ctx.Err()
	}
	events, err := c.LifecycleEvents(ctx)
	if err != nil {
		go m.disconnect(c)
		return nil, nil, fmt.Errorf("watch domain lifecycle events on %s: %w", m.uri, err)
	}
	return c, events, nil
}
