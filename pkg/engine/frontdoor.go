package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/vgpu-project/vgpu/pkg/config"
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

// LockHost holds the host as a kernel change does, until unlock: no other
// change or allocation proceeds meanwhile (vgpud's tests keep requests
// waiting with it).
func (e *Engine) LockHost() (unlock func()) {
	e.host.Lock()
	return e.host.Unlock
}
