package carve

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

// typesNVML answers VGPUTypes only, failing while fail is set, and counts
// the calls; any other call panics (the embedded Manager is nil).
type typesNVML struct {
	nvstate.Manager
	fail  bool
	calls int
}

func (m *typesNVML) VGPUTypes(pci.Address) ([]nvstate.VGPUType, error) {
	m.calls++
	if m.fail {
		return nil, errors.New("NVML_ERROR_NOT_SUPPORTED")
	}
	return []nvstate.VGPUType{{ID: 1153, Name: "NVIDIA L40S-12Q"}}, nil
}

// TestEnrichKnownNeverAsks: EnrichKnown gives what NVML answered to Enrich
// and never asks NVML, not even when that answer is a failure past its
// retry time or was for another GPU at the address; Enrich asks then.
func TestEnrichKnownNeverAsks(t *testing.T) {
	dir := t.TempDir()
	site := "version: v1\nmodel: NVIDIA L40S\nmatch: {vendor: 10de, devices: [26b9, 26b5]}\ndialect: nvidia-vf\nframebuffer-mb: 49152\n" +
		"profiles:\n  - name: site-l40s-12q\n    split: 4\n    nvidia-type: {name: NVIDIA L40S-12Q}\n"
	if err := os.WriteFile(filepath.Join(dir, "site.yaml"), []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}
	cat, err := profile.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := &typesNVML{fail: true}
	c := New(nil, cat, nil, WithMIG(m))
	addr := pci.MustParseAddress("0000:86:00.0")
	gpu := func(device uint16) inventory.GPU {
		return inventory.GPU{Address: addr, VendorID: inventory.VendorNVIDIA, DeviceID: device, Driver: "nvidia",
			NVIDIADriver: &inventory.NVIDIADriver{Version: "550.54.10", VGPUHost: true}} // NVML lists types under the vGPU host driver only
	}
	step := func(what string, enrich func(*inventory.GPU), device uint16, calls int, types bool) {
		t.Helper()
		g := gpu(device)
		enrich(&g)
		if m.calls != calls || (len(g.NVIDIATypes) > 0) != types {
			t.Fatalf("%s: %d NVML calls, types %v; want %d calls, types %v", what, m.calls, g.NVIDIATypes, calls, types)
		}
	}
	if !namedOnly(cat, gpu(0x26b9)) {
		t.Fatal("the site's L40S profile does not name its type only: the test proves nothing")
	}
	step("known, nothing asked yet", c.EnrichKnown, 0x26b9, 0, false)
	step("asked, NVML fails", c.Enrich, 0x26b9, 1, false)
	step("asked again within the retry time", c.Enrich, 0x26b9, 1, false)
	m.fail = false
	c.types[addr] = nvAnswer[[]inventory.VGPUType]{device: 0x26b9, failed: time.Now().Add(-2 * typesRetry)}
	step("known, the failure past its retry time", c.EnrichKnown, 0x26b9, 1, false)
	step("asked, the failure past its retry time", c.Enrich, 0x26b9, 2, true)
	step("known after NVML answered", c.EnrichKnown, 0x26b9, 2, true)
	step("asked after NVML answered", c.Enrich, 0x26b9, 2, true)
	step("known, another GPU at the address", c.EnrichKnown, 0x26b5, 2, false)
	step("asked, another GPU at the address", c.Enrich, 0x26b5, 3, true)
}
