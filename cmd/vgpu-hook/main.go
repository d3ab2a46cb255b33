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
