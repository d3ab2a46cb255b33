//go:build !cgo

package nvmlstate

import (
	"errors"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// A build without cgo refuses every MIG call with one line that says how
// to build one that works.
func TestStaticBuildRefuses(t *testing.T) {
	gpu := pci.MustParseAddress("0000:ca:00.0")
	_, err := New("").Mode(gpu)
	if !errors.Is(err, nvstate.ErrUnavailable) || !strings.Contains(err.Error(), "GPU 0000:ca:00.0") ||
		!strings.Contains(err.Error(), "build vgpu-nvml with CGO_ENABLED=1") {
		t.Fatalf("err = %v", err)
	}
	if _, err := New("").MixedSize(gpu); !errors.Is(err, nvstate.ErrUnavailable) {
		t.Fatalf("MixedSize: err = %v", err)
	}
	if err := New("").SetMixedSize(gpu, true); !errors.Is(err, nvstate.ErrUnavailable) {
		t.Fatalf("SetMixedSize: err = %v", err)
	}
}
