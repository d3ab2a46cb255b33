//go:build labguest

package guest

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-project/vgpu/e2e/lab/diff"
	"github.com/vgpu-project/vgpu/e2e/lab/vfio"
)

// TestDifferentialRecord runs the differential sequence against the real
// kernel, on a freshly booted guest, and writes the observations to
// /lab/out/diff-real.json; the host compares them with the fake kernel's.
func TestDifferentialRecord(t *testing.T) {
	// Devices are held as QEMU holds them: the whole VFIO uAPI.
	hold := func(devDir, name, _ string) (io.Closer, error) { return vfio.Open(devDir, name) }
	// The sequence moves the NVMe PF to pci-pf-stub, as NVIDIA's
	// sriov-manage moves a GPU's.
	if _, errOut, code := run(t, "modprobe", "pci-pf-stub"); code != 0 {
		t.Fatalf("modprobe pci-pf-stub: exit %d: %s", code, errOut)
	}
	obs, err := diff.Run(host, diff.Sequence(), diff.Config{Open: hold})
	if err != nil {
		t.Fatalf("the sequence itself is broken: %v", err)
	}
	b, err := json.MarshalIndent(obs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outDir, "diff-real.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d observations written", len(obs))
}
