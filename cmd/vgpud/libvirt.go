package main

import (
	"context"
	"log/slog"

	"github.com/vgpu-project/vgpu/pkg/daemon"
	"github.com/vgpu-project/vgpu/pkg/virt/watch"
)

// watchLibvirt gives o a view of libvirt's domains at uri, kept by a
// Monitor that runs until ctx ends ("" disables it). The returned func
// waits for the Monitor to stop, so that nothing logs after vgpud has
// returned.
func watchLibvirt(ctx context.Context, uri string, o *daemon.Options, log *slog.Logger) (wait func(), err error) {
	if uri == "" {
		return func() {}, nil
	}
	m, err := watch.NewMonitor(uri, log)
	if err != nil {
		return nil, err
	}
	o.Domains, o.DomainEvents = m, m.Events()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(ctx)
	}()
	return func() { <-done }, nil
}
