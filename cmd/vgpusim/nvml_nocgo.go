//go:build !cgo

package main

import (
	"context"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
)

// serveNVML serves no NVML: the fake one is built on go-nvml's types,
// which need cgo. MIG-backed, scheduler and mixed-size profiles then fail
// on the simulated host as on a host without libnvidia-ml.
func serveNVML(context.Context, *simkernel.Kernel, simkernel.Host, string) error { return nil }
