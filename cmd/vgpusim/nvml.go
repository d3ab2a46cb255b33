//go:build cgo

package main

import (
	"context"
	"path/filepath"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvstaterpc"
)

// serveNVML joins the fake NVML of host's NVIDIA GPUs to k, serves it on
// a socket in dir until ctx ends, and links nvstate.SimSocket in the mount to
// it: vgpud and vgpuctl given the mount as --sysfs-root use it where a
// host has libnvidia-ml. A host without such GPUs gets none.
func serveNVML(ctx context.Context, k *simkernel.Kernel, host simkernel.Host, dir string) error {
	nv, err := simnvml.ForHost(k, host)
	if err != nil || nv == nil {
		return err
	}
	sock := filepath.Join(dir, "nvml.sock")
	if err := serveOn(ctx, sock, "NVML", nvstaterpc.Handler(nvmlstate.NewWith(nv, "the simulated host's NVML"))); err != nil {
		return err
	}
	k.Link("/"+nvstate.SimSocket, sock)
	return nil
}
