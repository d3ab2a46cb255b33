// Command vgpu-hook is libvirt's QEMU hook for vgpu, installed as
// /etc/libvirt/hooks/qemu.d/vgpu by `vgpuctl hook install`. libvirt runs it
// as `vgpu DOMAIN OPERATION SUBOPERATION EXTRA` with the domain XML on
// stdin; pkg/hook decides what to do and asks vgpud over its socket
// (/run/vgpud/vgpud.sock; $VGPU_SOCKET when set). It is built without cgo
// and never calls libvirt.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/vgpu-project/vgpu/pkg/hook"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := hook.New(newAgent(os.Getenv(SocketEnv))).Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
