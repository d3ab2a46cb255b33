package simhost

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-project/vgpu/e2e/internal/simproc"
)

// bins holds the binaries TestMain built; set once before any test runs.
type bins struct {
	vgpusim, vgpuctl string
	repo             string // repository root, for examples/hosts
}

// built is written by TestMain only, before m.Run, and read-only after.
var built bins

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if err := simproc.CheckHost(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/simhost:", err)
		return 1
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/simhost: find the repository root:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "vgpu-simhost-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/simhost: create a directory for the binaries:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	built = bins{vgpusim: filepath.Join(dir, "vgpusim"), vgpuctl: filepath.Join(dir, "vgpuctl"), repo: repo}
	// vgpusim gets the race detector when this test binary has it: the
	// server's concurrency is what these tests exercise. vgpuctl's is
	// covered by its own tests, and a race build is 8 times slower to run.
	for b, race := range map[string]bool{built.vgpusim: simproc.RaceEnabled(), built.vgpuctl: false} {
		if err := simproc.Build(repo, b, race); err != nil {
			fmt.Fprintln(os.Stderr, "e2e/simhost:", err)
			return 1
		}
	}
	return m.Run()
}
