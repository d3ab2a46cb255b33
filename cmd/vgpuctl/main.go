package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], env{
		stdout: os.Stdout,
		stderr: os.Stderr,
		openFS: func(root string) sysfs.FS { return sysfs.NewOS(root) },
	})
	stop()
	os.Exit(code)
}
