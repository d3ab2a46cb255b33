package diff_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/e2e/lab/diff"
	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
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
	k, err := simkernel.New(diff.FakeHost())
	if err != nil {
		t.Fatal(err)
	}
	fake, err := diff.Run(k, diff.Sequence(), diff.Config{PendingAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("the sequence on the fake kernel: %v", err)
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
