package engine

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
)

// Domains of the tests (pkg/daemon's tests use the same).
const (
	domA = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
	// A deterministic mdev identity, as the hook would name it.
	mdevA0 = "0b4c2a51-7a3e-5d61-9c1f-2e8d6b4a3c10"
)

// Configs of the tests, for examples/hosts/mixed.yaml.
const (
	cfgMixed = `version: v1
gpus:
  - address: "0000:03:00.0"
    profile: mi25-4g
  - address: "0000:3b:00.0"
    profile: t4-4q
  - all: true
    profile: l40s-12q
`
	cfgMixedDestroy = cfgMixed + "on-release: destroy\n"
)

func newKernel(t testing.TB, hostFile string) *simkernel.Kernel {
	t.Helper()
	h, err := simkernel.LoadHost(filepath.Join("..", "..", "examples", "hosts", hostFile))
	if err != nil {
		t.Fatal(err)
	}
	k, err := simkernel.New(h)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

var bg = context.Background()
