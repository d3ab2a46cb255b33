//go:build e2e

package lab

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-project/vgpu/e2e/lab/diff"
)

// TestDifferential runs diff.Sequence on the real kernel (a fresh boot of
// the lab) and on the fake kernel with the same devices, and fails on every
// step where they disagree: each difference is a bug in the fake. With
// VGPU_LAB_RECORD=1 it also refreshes the recording the fake is checked
// against in the ordinary test suite (e2e/lab/diff/testdata).
func TestDifferential(t *testing.T) {
	b := guestTests(t, "^TestDifferentialRecord$")
	data, err := os.ReadFile(filepath.Join(b.share, "out", "diff-real.json"))
	if err != nil {
		t.Fatalf("the guest wrote no observations: %v", err)
	}
	var real []diff.Observation
	if err := json.Unmarshal(data, &real); err != nil {
		t.Fatalf("decode the guest's observations: %v", err)
	}
	fake, err := diff.RunFake()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diff.Compare(real, fake) {
		t.Errorf("fake kernel differs: %s", d)
	}
	t.Logf("%d steps compared", len(real))

	rec := filepath.Join(repoDir, diff.RecordingPath)
	if os.Getenv("VGPU_LAB_RECORD") == "1" {
		if err := os.WriteFile(rec, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded the real kernel's observations in %s", rec)
		return
	}
	recorded, err := diff.LoadRecording(rec)
	if err != nil {
		t.Fatalf("%v (record it: VGPU_LAB_RECORD=1 make e2e)", err)
	}
	for _, d := range diff.Compare(real, recorded) {
		t.Errorf("the recording %s is stale (re-record: VGPU_LAB_RECORD=1 make e2e): %s (real %q, recorded %q)",
			diff.RecordingPath, d.Step, d.Real, d.Fake)
	}
}
