package enginetest

import (
	"log/slog"
	"os"
	"testing"
)

// Configs for examples/hosts/mixed.yaml: MixedMI25T4Config puts its MI25
// in mi25-4g VFs and its T4 in t4-4q mdevs and leaves its L40S alone;
// MixedConfig also puts every other GPU (the L40S) in l40s-12q; Destroy
// also destroys what a domain releases.
const (
	MixedMI25T4Config = `version: v1
gpus:
  - address: "0000:03:00.0"
    profile: mi25-4g
  - address: "0000:3b:00.0"
    profile: t4-4q
`
	MixedConfig = MixedMI25T4Config + `  - all: true
    profile: l40s-12q
`
	MixedConfigDestroy = MixedConfig + "on-release: destroy\n"
)

// Logger is a logger for the engine under test (call it from a test):
// debug lines on stderr with -v, nothing without.
func Logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
