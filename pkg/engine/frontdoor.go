package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// PluginOptions is what vgpud makes the kubelet's device plugin from
// (daemon.Options.DevicePlugin): a front door beside the HTTP API, on the
// same engine.
type PluginOptions struct {
	Engine *Engine
	// Config is the config's kubernetes section, with DevicePlugin on.
	Config config.Kubernetes
	Logger *slog.Logger
	// Grace is daemon.Options.CollectGrace; PodResourcesEvery is its
	// PodResourcesEvery.
	Grace, PodResourcesEvery time.Duration
}

// Runner serves until its context ends.
type Runner interface{ Run(ctx context.Context) }

// ReserveGranted is Reserve, and also returns the allocations it made now
// (not those the domain held already): what Revoke takes back when the
// caller hung up before the answer reached it.
func (e *Engine) ReserveGranted(ctx context.Context, req alloc.Request) (api.Holdings, []ledger.Allocation, error) {
	return e.reserve(ctx, req)
}

// Revoke takes back what a reservation granted, as far as it is still as
// granted (alloc.Revoke).
func (e *Engine) Revoke(ctx context.Context, granted []ledger.Allocation) ([]ledger.Allocation, error) {
	return e.revoke(ctx, granted)
}

// Changing says whether a manual carve or uncarve of owner (a GPU's
// address, a virtual parent's name) is under way.
func (e *Engine) Changing(owner string) bool { return e.isChanging(owner) }

// LockHost holds the host as a kernel change does, until unlock: no other
// change or allocation proceeds meanwhile (vgpud's tests keep requests
// waiting with it).
func (e *Engine) LockHost() (unlock func()) {
	e.host.Lock()
	return e.host.Unlock
}
