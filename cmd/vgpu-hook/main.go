// Command vgpu-hook is libvirt's QEMU hook for vgpu, installed as
// /etc/libvirt/hooks/qemu.d/vgpu by `vgpuctl hook install`. libvirt runs it
// as `vgpu DOMAIN OPERATION SUBOPERATION EXTRA` with the domain XML on
// stdin; pkg/hook decides what to do. It is built without cgo and never
// calls libvirt.
package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/hook"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := hook.New(newAgent()).Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// newAgent is where the vgpud client plugs in. Only domains with a vGPU
// request ever reach it: the hook passes every other domain untouched.
func newAgent() hook.Agent { return unavailable{} }

// errUnavailable is the answer until the vgpud client exists.
var errUnavailable = errors.New("vgpud agent is not available")

// unavailable is the Agent of a host without vgpud.
type unavailable struct{}

var _ hook.Agent = unavailable{}

func (unavailable) Ready(context.Context, domxml.Domain) (hook.Readied, error) {
	return hook.Readied{}, errUnavailable
}

func (unavailable) Release(context.Context, domxml.Domain) (hook.Released, error) {
	return hook.Released{}, errUnavailable
}

func (unavailable) Lease(context.Context, domxml.Domain) (hook.Leased, error) {
	return hook.Leased{}, errUnavailable
}
