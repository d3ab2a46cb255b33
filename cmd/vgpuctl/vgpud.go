package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/daemon"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// probeTimeout bounds the health call that decides whether vgpud runs: a
// missing socket fails at once; a hung vgpud must not hang vgpuctl.
const probeTimeout = 2 * time.Second

// vgpud returns a client of the vgpud answering on --socket, or nil when
// none does: vgpuctl then works on the host directly. The answer is
// remembered for the rest of the command.
func (g *globals) vgpud(ctx context.Context) *client.Client {
	if g.probed {
		return g.daemon
	}
	g.probed = true
	if g.socket == "" {
		return nil
	}
	c := client.New(g.socket)
	if c.Available(ctx, probeTimeout) {
		g.daemon = c
	}
	return g.daemon
}

// reservations is the Reserver of attach and detach: the one env gives
// (tests), else vgpud's when it answers on --socket, else nil.
func (g *globals) reservations(ctx context.Context) Reserver {
	if g.reserver != nil {
		return g.reserver
	}
	return g.defaultReserver(ctx)
}

// defaultReserver is vgpud's ledger for attach and detach, or nil when
// vgpud does not run.
func (g *globals) defaultReserver(ctx context.Context) Reserver {
	if c := g.vgpud(ctx); c != nil {
		return vgpudReserver{c}
	}
	return nil
}

// vgpudReserver reserves through vgpud's API.
type vgpudReserver struct{ c *client.Client }

var _ Reserver = vgpudReserver{}

// Reserve implements Reserver.
func (r vgpudReserver) Reserve(ctx context.Context, domainUUID, domainName, prof string, count int) ([]Reserved, error) {
	h, err := r.c.Reserve(ctx, domainUUID, api.ReserveRequest{Name: domainName, Profile: prof, Count: count})
	if err != nil {
		return nil, err
	}
	out := make([]Reserved, len(h.Allocations))
	for i, a := range h.Allocations {
		out[i] = Reserved{ID: a.VGPU, Kind: vgpu.Kind(a.Kind)}
		if out[i].Kind == vgpu.KindMdev {
			out[i].UUID = a.VGPU
		} else if addr, err := pci.ParseAddress(a.VGPU); err == nil {
			out[i].Address = addr
		}
	}
	return out, nil
}

// Prepare implements Reserver.
func (r vgpudReserver) Prepare(ctx context.Context, domainUUID, domainName, prof string, ids []string) error {
	_, err := r.c.Prepare(ctx, domainUUID, api.PrepareRequest{Name: domainName, Profile: prof, Count: len(ids), VGPUs: ids})
	return err
}

// Release implements Reserver: each id is unreserved; one the domain no
// longer holds is not an error.
func (r vgpudReserver) Release(ctx context.Context, domainUUID string, ids []string) ([]string, error) {
	var errs []error
	var released []string
	for _, id := range ids {
		h, err := r.c.Unreserve(ctx, domainUUID, id)
		switch {
		case errors.Is(err, client.ErrNotFound):
		case err != nil:
			errs = append(errs, err)
		default:
			for _, a := range h.Allocations {
				released = append(released, a.VGPU)
			}
		}
	}
	return released, errors.Join(errs...)
}

// openLedger opens the ledger in --state-dir for vgpuctl's own use while
// no vgpud runs. A running vgpud holds it: the error says so.
func (g *globals) openLedger(opts ...ledger.Option) (*ledger.Ledger, error) {
	l, err := ledger.Open(filepath.Join(g.stateDir, daemon.LedgerFile), opts...)
	if errors.Is(err, ledger.ErrLocked) {
		return nil, fmt.Errorf("%w; vgpud does not answer on %s: is it starting, or hung?", err, g.socket)
	}
	return l, err
}

// carver is the carver of a host without vgpud: the ledger remembers
// original drivers and the VF driver autoprobe a carve turns, and protects
// what it allocates, as in vgpud; the lock directory is shared with vgpud.
// close releases the ledger.
func (g *globals) carver(cat *profile.Catalog) (c *carve.Carver, close func(), err error) {
	l, err := g.openLedger()
	if err != nil {
		return nil, nil, err
	}
	// The static build's NVML says to use vgpud for MIG-backed profiles.
	c = carve.New(g.fs(), cat, l, carve.WithUsage(l), carve.WithAutoprobeJournal(l),
		carve.WithLocker(carve.NewLocker(filepath.Join(g.stateDir, daemon.LocksDir))), carve.WithMIG(g.mig()))
	return c, func() { _ = l.Close() }, nil
}
