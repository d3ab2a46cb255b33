package main

import (
	"context"
	"time"

	"github.com/vgpu-project/vgpu/pkg/attach"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/engine"
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
func (g *globals) reservations(ctx context.Context) attach.Reserver {
	if g.reserver != nil {
		return g.reserver
	}
	if c := g.vgpud(ctx); c != nil {
		return attach.VgpudReserver{Client: c}
	}
	return nil
}

// local is vgpud's engine in process, for a host where no vgpud answers.
func (g *globals) local() engine.Local {
	return engine.Local{StateDir: g.stateDir, Socket: g.socket, FS: g.fs(), MIG: g.mig(), MdevctlDir: g.mdevctlDir(), Warn: g.stderr}
}
