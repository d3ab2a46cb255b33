package engine

import (
	"context"

	"github.com/vgpu-project/vgpu/pkg/engine/enginetest"
)

// Domains of the tests (pkg/daemon's tests use the same).
const (
	domA = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
	// A deterministic mdev identity, as the hook would name it.
	mdevA0 = "0b4c2a51-7a3e-5d61-9c1f-2e8d6b4a3c10"
)

// Configs of the tests, for examples/hosts/mixed.yaml.
const (
	cfgMixed        = enginetest.MixedConfig
	cfgMixedDestroy = enginetest.MixedConfigDestroy
)

var bg = context.Background()
