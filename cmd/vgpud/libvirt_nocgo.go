//go:build !cgo

package main

import (
	"context"
	"log/slog"

	"github.com/vgpu-project/vgpu/pkg/daemon"
)

// watchLibvirt: a vgpud built without cgo cannot link libvirt.
func watchLibvirt(_ context.Context, uri string, _ *daemon.Options, log *slog.Logger) (wait func()) {
	if uri != "" {
		log.Warn("built without cgo: libvirt's domains are not watched; vGPUs of gone domains are freed only by vgpuctl release", "uri", uri)
	}
	return func() {}
}
