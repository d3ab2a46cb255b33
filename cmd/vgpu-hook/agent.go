package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/vgpu-project/vgpu/internal/revert"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/hook"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// SocketEnv names the environment variable that points the hook at another
// vgpud socket than api.DefaultSocket. libvirt clears a hook's environment
// (only PATH, HOME and a few more pass), so this is for running the hook by
// hand or from a test, not a setting of production hosts.
const SocketEnv = "VGPU_SOCKET"

// LeaseTTL is how long a lease taken at migrate/begin or restore/begin
// holds the vGPUs: libvirt runs prepare/begin, which turns the lease into
// the allocation, right after it; a migration that fails before that
// leaves the vGPUs free again once it expires.
const LeaseTTL = 10 * time.Minute

// agent is hook.Agent over vgpud's API on a unix socket. It makes its
// client at the first call: a domain without a vGPU request never gets
// that far, and so costs nothing but the process start.
type agent struct {
	socket string
	c      *client.Client
}

var _ hook.Agent = (*agent)(nil)

// newAgent returns the agent of the vgpud on socket ("" is
// api.DefaultSocket). It does not connect.
func newAgent(socket string) *agent {
	if socket == "" {
		socket = api.DefaultSocket
	}
	return &agent{socket: socket}
}

func (a *agent) client() *client.Client {
	if a.c == nil {
		a.c = client.New(a.socket)
	}
	return a.c
}

// plain says "vgpud is not running" without the HTTP request around it:
// libvirt shows the line to someone starting a VM. Other errors are
// vgpud's own messages, already plain.
func (a *agent) plain(err error) error {
	var errno syscall.Errno
	if errors.Is(err, client.ErrUnavailable) && errors.As(err, &errno) {
		return fmt.Errorf("%w on %s: %w (is vgpud running? systemctl start vgpud)", client.ErrUnavailable, a.socket, errno)
	}
	return err
}

// Ready implements hook.Agent: prepare/begin asks vgpud to make the vGPUs
// the hostdevs carry ready and attached.
func (a *agent) Ready(ctx context.Context, d domxml.Domain) (hook.Readied, error) {
	ids := make([]string, len(d.Hostdevs))
	for i, v := range d.Hostdevs {
		ids[i] = v.ID()
	}
	h, err := a.client().Prepare(ctx, d.UUID, api.PrepareRequest{Name: d.Name, Profile: d.Request.Profile,
		Count: len(ids), VGPUs: ids})
	if err != nil {
		return hook.Readied{}, a.plain(err)
	}
	out := hook.Readied{}
	for _, al := range h.Allocations {
		out.VGPUs = append(out.VGPUs, al.VGPU)
	}
	return out, nil
}

// Release implements hook.Agent: release/end tells vgpud the VM stopped;
// its on-release policy decides what happens to the vGPUs.
func (a *agent) Release(ctx context.Context, d domxml.Domain) (hook.Released, error) {
	r, err := a.client().Release(ctx, d.UUID, api.ReleaseRequest{Name: d.Name})
	if err != nil {
		return hook.Released{}, a.plain(err)
	}
	out := hook.Released{VGPUs: slices.Clone(r.Destroyed)}
	for _, al := range r.Kept {
		out.VGPUs = append(out.VGPUs, al.VGPU)
	}
	return out, nil
}

// Lease implements hook.Agent for migrate/begin and restore/begin. A
// domain that already holds vGPUs of its profile on this host (a restore
// after virsh save or managedsave, a migration back) keeps them: its
// hostdevs are pointed at what it holds. Otherwise vgpud leases one vGPU
// of the profile per hostdev. PCI vGPUs (vf, nvidia-vf, pf) move to the
// addresses vgpud holds for the domain; an mdev keeps its UUID, which
// derives from the domain, and vgpud creates it from the leased one at
// prepare.
func (a *agent) Lease(ctx context.Context, d domxml.Domain) (hook.Leased, error) {
	return a.lease(ctx, d, false)
}

// Probe implements hook.Agent: what Lease would do, by a dry-run lease
// that holds nothing.
func (a *agent) Probe(ctx context.Context, d domxml.Domain) (hook.Leased, error) {
	return a.lease(ctx, d, true)
}

func (a *agent) lease(ctx context.Context, d domxml.Domain, dry bool) (hook.Leased, error) {
	c := a.client()
	all, err := c.Allocations(ctx)
	if err != nil {
		return hook.Leased{}, a.plain(err)
	}
	var held []string
	for _, al := range all.Allocations {
		if al.DomainUUID == d.UUID && al.Profile == d.Request.Profile {
			held = append(held, al.VGPU)
		}
	}
	if len(held) > 0 {
		free, err := a.admit(ctx, d, held)
		if err != nil {
			return hook.Leased{}, err
		}
		moves, err := movesOnto(d, held, "holds")
		return hook.Leased{Moves: moves, Free: free}, err
	}
	h, err := c.Lease(ctx, d.UUID, api.LeaseRequest{Name: d.Name, Profile: d.Request.Profile,
		Count: len(d.Hostdevs), TTLSeconds: int(LeaseTTL / time.Second), DryRun: dry})
	if err != nil {
		return hook.Leased{}, a.plain(err)
	}
	var leased []string
	var expires time.Time
	for _, l := range h.Leases {
		leased = append(leased, l.VGPU)
		if expires.IsZero() || l.Expires.Before(expires) {
			expires = l.Expires
		}
	}
	var undo revert.List
	if !dry {
		undo.Add("dropping the leases", func() error {
			if _, err := c.DropLeases(ctx, d.UUID); err != nil {
				return fmt.Errorf("%w (they expire by themselves)", a.plain(err))
			}
			return nil
		})
	}
	free, err := a.admit(ctx, d, leased)
	if err != nil {
		// Refused before any memory moved: the leases go at once.
		return hook.Leased{}, undo.Fail(err)
	}
	moves, err := movesOnto(d, leased, "leased")
	if err != nil {
		// The migration fails here: nothing will use the leases.
		return hook.Leased{}, undo.Fail(err)
	}
	undo.Success()
	return hook.Leased{Moves: moves, Expires: expires, Free: free}, nil
}

// admit refuses vGPUs that differ from what the domain runs with on the
// host it migrates from (the origin the source put in its request): a
// device state saved by one type or driver does not load into another.
// A restore or a domain without an origin is not compared. It returns how
// many vGPUs of the profile are free here (-1 when not asked).
func (a *agent) admit(ctx context.Context, d domxml.Domain, ids []string) (free int, err error) {
	o := d.Request.Origin
	if o == nil {
		return -1, nil
	}
	vs, err := a.client().VGPUs(ctx)
	if err != nil {
		return 0, a.plain(err)
	}
	for _, v := range vs {
		if v.Profile == d.Request.Profile && v.State == api.StateFree {
			free++
		}
	}
	for _, id := range ids {
		for _, v := range vs {
			if v.ID != id {
				continue
			}
			if m := o.Mismatch(domxml.Origin{Type: v.Type, Driver: v.VendorDriver, Version: v.DriverVersion}); m != "" {
				return 0, fmt.Errorf("this host's vGPU %s for %s differs from the one it runs with: %s; its device state cannot load here", id, d.Name, m)
			}
		}
	}
	return free, nil
}

// movesOnto maps each of d's vGPUs to one of ids, the vGPUs vgpud holds
// or leased for d here: an mdev to itself; a PCI vGPU to itself when ids
// has its address (it is this host's already), else to the next PCI id
// nothing else took, in order.
func movesOnto(d domxml.Domain, ids []string, how string) (map[string]domxml.VGPU, error) {
	var free []pci.Address
	for _, id := range ids {
		if addr, err := pci.ParseAddress(id); err == nil && !slices.ContainsFunc(d.Hostdevs, func(v domxml.VGPU) bool { return v.ID() == id }) {
			free = append(free, addr)
		}
	}
	moves := map[string]domxml.VGPU{}
	for _, v := range d.Hostdevs {
		switch {
		case !v.IsPCI(), slices.Contains(ids, v.ID()):
			moves[v.ID()] = v
		case len(free) > 0:
			moves[v.ID()] = domxml.PCIVGPU(v.Index, v.Kind, free[0])
			free = free[1:]
		default:
			return nil, fmt.Errorf("vgpud %s %d x %s for %s on this host (%s), too few PCI functions for its %d hostdevs",
				how, len(ids), d.Request.Profile, d.Name, strings.Join(ids, ", "), len(d.Hostdevs))
		}
	}
	return moves, nil
}
