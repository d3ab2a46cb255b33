package simhost

import (
	"fmt"
	"os"
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
	// vgpusim gets the race detector when this test binary has it: the
	// server's concurrency is what these tests exercise. vgpuctl's is
	// covered by its own tests, and a race build is 8 times slower to run.
	b, err := simproc.BuildAll("vgpu-simhost-bin-", map[string]bool{"vgpusim": simproc.RaceEnabled(), "vgpuctl": false})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/simhost:", err)
		return 1
	}
	defer os.RemoveAll(b.Dir)
	built = bins{vgpusim: b.Path("vgpusim"), vgpuctl: b.Path("vgpuctl"), repo: b.Repo}
	return m.Run()
}
