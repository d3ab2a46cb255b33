package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvstaterpc"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// TestServesNVML runs the built helper as vgpud does: a call reaches
// nvmlstate in it, which, with no NVIDIA driver here, answers that the named
// library did not load, as unavailable, and nothing lands on stderr.
func TestServesNVML(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "vgpu-nvml")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var stderr bytes.Buffer
	lib := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	c := nvstaterpc.Exec(bin, []string{"--library", lib}, &stderr)
	gpu := pci.MustParseAddress("0000:ca:00.0")
	_, err := c.Mode(gpu)
	if !errors.Is(err, nvstate.ErrUnavailable) || !strings.Contains(err.Error(), "GPU 0000:ca:00.0") ||
		!strings.Contains(err.Error(), lib+" did not load") {
		t.Fatalf("err = %v", err)
	}
	if err := c.SetMixedSize(gpu, true); !errors.Is(err, nvstate.ErrUnavailable) {
		t.Fatalf("second call: err = %v", err)
	}
	if stderr.Len() != 0 {
		t.Fatalf("stderr: %s", stderr.String())
	}
}

// TestNotBySocket: run by hand, without its socket, it says who starts it.
func TestNotBySocket(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := run(nil, f, &stderr); code != 2 || !strings.Contains(stderr.String(), "vgpud and vgpuctl start this helper") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if code := run([]string{"extra"}, f, &stderr); code != 2 {
		t.Fatalf("extra argument: exit %d", code)
	}
}
