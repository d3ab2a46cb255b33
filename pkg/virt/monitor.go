//go:build cgo

package virt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"libvirt.org/go/libvirt"
)

// Monitor is vgpud's read-only view of libvirt: which domains exist, and a
// signal on every domain lifecycle event. vgpud starts before libvirtd, so
// the Monitor connects when it can and reconnects when libvirtd restarts;
// while it is not connected, Domains fails and the caller must not
// conclude anything from it.
type Monitor struct {
	uri    string
	log    *slog.Logger
	retry  time.Duration
	events chan struct{}

	mu   sync.Mutex
	conn *libvirt.Connect
}

// NewMonitor returns a Monitor of the libvirt at uri; Run connects it.
func NewMonitor(uri string, log *slog.Logger) *Monitor {
	return &Monitor{uri: uri, log: log, retry: 5 * time.Second, events: make(chan struct{}, 1)}
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
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == nil {
		return nil, &Error{Action: "list the domains of " + m.uri + ": not connected to libvirt", Kind: ErrConnect}
	}
	return listDomains(m.conn, m.uri)
}

func listDomains(c *libvirt.Connect, uri string) (map[string]bool, error) {
	ds, err := c.ListAllDomains(0)
	if err != nil {
		return nil, wrap(err, "list the domains of %s", uri)
	}
	out := make(map[string]bool, len(ds))
	var errs []error
	for i := range ds {
		u, err := ds[i].GetUUIDString()
		if err == nil {
			var active bool
			if active, err = ds[i].IsActive(); err == nil {
				out[strings.ToLower(u)] = active
			}
		}
		// A domain undefined between the list and the question is gone.
		if err != nil && !errors.Is(err, libvirt.ERR_NO_DOMAIN) {
			errs = append(errs, wrap(err, "read a domain of %s", uri))
		}
		_ = ds[i].Free()
	}
	return out, errors.Join(errs...)
}

// Run keeps the connection until ctx ends: it connects, retries every few
// seconds while libvirtd is away, and reconnects when the connection
// closes (libvirtd restarted or keepalive failed). It registers libvirt's
// default event loop, so use one Monitor per process.
func (m *Monitor) Run(ctx context.Context) error {
	if err := libvirt.EventRegisterDefaultImpl(); err != nil {
		return wrap(err, "register libvirt's event loop")
	}
	// The loop wakes at least once a second, so it sees ctx end.
	tick, err := libvirt.EventAddTimeout(1000, func(int) {})
	if err != nil {
		return wrap(err, "add a timer to libvirt's event loop")
	}
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for ctx.Err() == nil {
			if err := libvirt.EventRunDefaultImpl(); err != nil {
				m.log.Warn("libvirt event loop", "err", err)
				time.Sleep(time.Second)
			}
		}
	}()
	defer func() {
		_ = libvirt.EventRemoveTimeout(tick)
		<-loopDone
	}()
	logged := false
	for ctx.Err() == nil {
		closed, err := m.connect()
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
		m.signal()
		select {
		case <-ctx.Done():
		case <-closed:
			m.log.Info("libvirt connection closed; reconnecting", "uri", m.uri)
		}
		m.disconnect()
	}
	return nil
}

// connect opens the connection and registers the callbacks; closed is
// closed when libvirt drops it.
func (m *Monitor) connect() (<-chan struct{}, error) {
	c, err := libvirt.NewConnectReadOnly(m.uri)
	if err != nil {
		return nil, wrap(err, "connect to libvirt at %s", m.uri)
	}
	closed := make(chan struct{})
	var once sync.Once
	fail := func(what string, err error) (<-chan struct{}, error) {
		_, _ = c.Close()
		return nil, wrap(err, "%s on %s", what, m.uri)
	}
	if err := c.SetKeepAlive(5, 3); err != nil {
		return fail("set keepalive", err)
	}
	if err := c.RegisterCloseCallback(func(*libvirt.Connect, libvirt.ConnectCloseReason) {
		once.Do(func() { close(closed) })
	}); err != nil {
		return fail("watch the connection", err)
	}
	if _, err := c.DomainEventLifecycleRegister(nil, func(*libvirt.Connect, *libvirt.Domain, *libvirt.DomainEventLifecycle) {
		m.signal()
	}); err != nil {
		return fail("watch domain lifecycle events", err)
	}
	m.mu.Lock()
	m.conn = c
	m.mu.Unlock()
	return closed, nil
}

func (m *Monitor) disconnect() {
	m.mu.Lock()
	c := m.conn
	m.conn = nil
	m.mu.Unlock()
	if c == nil {
		return
	}
	_ = c.UnregisterCloseCallback()
	if _, err := c.Close(); err != nil {
		m.log.Debug("close the libvirt connection", "uri", m.uri, "err", fmt.Errorf("close %s: %w", m.uri, err))
	}
}
