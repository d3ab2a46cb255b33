//go:build cgo

package main

import (
	"context"
	"log/slog"

	"github.com/vgpu-project/vgpu/pkg/daemon"
	"github.com/vgpu-project/vgpu/pkg/virt"
)

// watchLibvirt gives o a view of libvirt's domains at uri, kept by a
// Monitor that runs until ctx ends ("" disables it). The returned func
// waits for the Monitor to stop (about a second after ctx ends), so that
// nothing logs after vgpud has returned.
func watchLibvirt(ctx context.Context, uri string, o *daemon.Options, log *slog.Logger) (wait func()) {
	if uri == "" {
		return func() {}
	}
	m := virt.NewMonitor(uri, log)
	o.Domains, o.DomainEvents = m, m.Events()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.Run(ctx); err != nil {
			log.Error("cannot watch libvirt's domains; vGPUs of gone domains are not collected", "uri", uri, "err", err)
		}
	}()
	return func() { <-done }
}
