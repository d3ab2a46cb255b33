package diff_test

import (
	"path/filepath"
	"testing"

	"github.com/vgpu-project/vgpu/e2e/lab/diff"
)

// TestFakeMatchesRecording checks the fake kernel against the real kernel's
// observations recorded in the lab (testdata/real-linux-6.12.json): the
// differential test without booting anything. The lab's own test
// (go test -tags e2e ./e2e/lab) compares against a live kernel and keeps
// the recording honest.
func TestFakeMatchesRecording(t *testing.T) {
	recorded, err := diff.LoadRecording(filepath.Join("testdata", filepath.Base(diff.RecordingPath)))
	if err != nil {
		t.Fatal(err)
	}
	fake, err := diff.RunFake()
	if err != nil {
		t.Fatal(err)
	}
	if len(recorded) != len(fake) {
		t.Errorf("the recording has %d steps, the sequence %d: re-record it in the lab (VGPU_LAB_RECORD=1 make e2e)",
			len(recorded), len(fake))
	}
	for i := range min(len(recorded), len(fake)) {
		if recorded[i].Step != fake[i].Step {
			t.Fatalf("step %d is %s in the recording, %s in the sequence: re-record it in the lab (VGPU_LAB_RECORD=1 make e2e)",
				i, recorded[i].Step, fake[i].Step)
		}
	}
	for _, d := range diff.Compare(recorded, fake) {
		t.Errorf("fake kernel differs from the recorded real kernel: %s", d)
	}
}
