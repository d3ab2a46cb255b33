package enginetest

import (
	"log/slog"
	"os"
	"testing"
)

// Configs for examples/hosts/mixed.yaml: its MI25 in mi25-4g VFs, its T4
// in t4-4q mdevs and every other GPU (its L40S) in l40s-12q; Destroy also
// destroys what a domain releases.
const (
	MixedConfig = `version: v1
gpus:
  - address: "0000:03:00.0"
    profile: mi25-4g
  - address: "0000:3b:00.0"
    profile: t4-4q
  - all: true
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
