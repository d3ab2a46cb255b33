package main

import (
	"errors"
	"fmt"

	"github.com/vgpu-project/vgpu/internal/helperbin"
)

// libvirtHelperEnv overrides where a CGO_ENABLED=0 vgpuctl finds its libvirt build.
const libvirtHelperEnv = "VGPUCTL_LIBVIRT"

// libvirtHelper finds vgpuctl-libvirt, the cgo build of vgpuctl that attach
// and detach need: $VGPUCTL_LIBVIRT, else next to this binary (a build tree's
// bin/), else ../libexec/vgpu/ beside it (make install).
func libvirtHelper() (string, error) {
	p, err := helperbin.Find("vgpuctl-libvirt", libvirtHelperEnv)
	if nf := (*helperbin.NotFoundError)(nil); errors.As(err, &nf) {
		return "", fmt.Errorf("attach, detach, migrate, recover-ledger and man run in vgpuctl-libvirt, vgpuctl's libvirt build, and %w", err)
	}
	return p, err
}
