package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/version"
)

// Exit codes; documented in the root help.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// env is what vgpusim takes from the outside world.
type env struct {
	stdout, stderr io.Writer
}

func run(ctx context.Context, args []string, e env) int {
	root := newRoot(e)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	err := usage.Execute(ctx, root, args)
	if err == nil {
		return exitOK
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	fmt.Fprintln(e.stderr, "vgpusim:", err)
	if usage.Is(err) {
		return exitUsage
	}
	return exitFailed
}

func newRoot(e env) *cobra.Command {
	root := &cobra.Command{
		Use:   "vgpusim",
		Short: "Serve a simulated GPU host's /sys and /dev/vfio over FUSE",
		Long: `vgpusim mounts a simulated host — GPUs described by a host file such as
examples/hosts/mixed.yaml — as a real filesystem: DIR/sys/bus/pci/devices/...,
DIR/sys/class/mdev_bus/..., DIR/dev/vfio/N. Writes there behave as on a Linux
kernel (VFs appear, mdevs are created, errors are the kernel's errno), so vgpuctl
and vgpud run against it unmodified with --sysfs-root DIR. Needs root and /dev/fuse.
The host's vendor tools (sriov-manage, modprobe) are there too, and a host with
NVIDIA GPUs the fake NVML models serves that NVML on DIR/run/vgpusim/nvml.sock,
where vgpud and vgpuctl look for it.

Faults can be injected while it runs through its control socket: the n-th write
to a path fails with an errno, or waits until released.

Exit codes:
  0  success (serve: stopped by SIGINT/SIGTERM and unmounted)
  1  failure
  2  bad flags or arguments`,
		Example: `  vgpusim serve --host examples/hosts/mixed.yaml --mount /run/vgpusim --control /run/vgpusim.sock
  vgpuctl --sysfs-root /run/vgpusim gpus
  vgpusim fault --control /run/vgpusim.sock --path /sys/bus/pci/devices/0000:03:00.0/sriov_numvfs --errno EBUSY
  vgpusim fault --control /run/vgpusim.sock --clear`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(usage.FlagError)
	root.AddCommand(newServeCmd(e), newFaultCmd(), newReleaseCmd(), newHoldsCmd(), newCountCmd("writes"), newCountCmd("opens"), newProcCmd())
	for tool := range sysfs.DefaultToolPaths() {
		root.AddCommand(newToolCmd(tool))
	}
	usage.MarkArgs(root)
	return root
}
