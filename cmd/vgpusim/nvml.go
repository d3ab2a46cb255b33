//go:build cgo

package main

import (
	"context"
	"path/filepath"

	"github.com/vgpu-project/vgpu/internal/simkernel"
	"github.com/vgpu-project/vgpu/internal/simnvml"
	"github.com/vgpu-project/vgpu/pkg/mig"
	"github.com/vgpu-project/vgpu/pkg/mig/migrpc"
	"github.com/vgpu-project/vgpu/pkg/mig/nvmlmig"
)

// serveNVML joins the fake NVML of host's NVIDIA GPUs to k, serves it on
// a socket in dir until ctx ends, and links mig.SimSocket in the mount to
// it: vgpud and vgpuctl given the mount as --sysfs-root use it where a
// host has libnvidia-ml. A host without such GPUs gets none.
func serveNVML(ctx context.Context, k *simkernel.Kernel, host simkernel.Host, dir string) error {
	nv, err := simnvml.ForHost(k, host)
	if err != nil || nv == nil {
		return err
	}
	sock := filepath.Join(dir, "nvml.sock")
	if err := serveOn(ctx, sock, "NVML", migrpc.Handler(nvmlmig.NewWith(nv, "the simulated host's NVML"))); err != nil {
		return err
	}
	k.Link("/"+mig.SimSocket, sock)
	return nil
}
