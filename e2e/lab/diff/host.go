package diff

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// RecordingPath is the real kernel's observations of Sequence, recorded in
// the lab (relative to the repository root): the ordinary test suite
// checks the fake against it without booting anything.
const RecordingPath = "e2e/lab/diff/testdata/real-linux-6.12.json"

// FakeHost is the fake kernel's equivalent of the lab guest: the igb and
// NVMe PFs at the lab's addresses and the mbochs and mtty parents, with
// pci-pf-stub loaded (the guest loads it before the sequence). (The lab's
// mdpy parent has no model; the sequence does not touch it.)
func FakeHost() simkernel.Host {
	return simkernel.Host{
		Version:   simkernel.HostVersion,
		NUMANodes: 1,
		Loaded:    []string{simkernel.DrvPFStub},
		GPUs: []simkernel.HostGPU{
			{Model: simkernel.ModelIGB, Address: pci.MustParseAddress(IGBAddr), NUMANode: -1},
			{Model: simkernel.ModelQEMUNVMe, Address: pci.MustParseAddress(NVMeAddr), NUMANode: -1},
			{Model: simkernel.ModelMbochs},
			{Model: simkernel.ModelMtty},
		},
	}
}

// LoadRecording reads recorded observations.
func LoadRecording(path string) ([]Observation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the recorded observations: %w", err)
	}
	var obs []Observation
	if err := json.Unmarshal(data, &obs); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return obs, nil
}

// RunFake runs Sequence on a fresh fake kernel with FakeHost's devices.
// The fake blocks a write for real, so a short PendingAfter suffices.
func RunFake() ([]Observation, error) {
	k, err := simkernel.New(FakeHost())
	if err != nil {
		return nil, fmt.Errorf("start the fake kernel: %w", err)
	}
	obs, err := Run(k, Sequence(), Config{PendingAfter: 100 * time.Millisecond})
	if err != nil {
		return nil, fmt.Errorf("the sequence on the fake kernel: %w", err)
	}
	return obs, nil
}
