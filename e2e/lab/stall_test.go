//go:build e2e

package lab

import (
	"strings"
	"testing"
)

// TestStallWatch: the watcher stops a guest only after stallReports
// reports, even when they arrive split across writes.
func TestStallWatch(t *testing.T) {
	calls := 0
	w := &stallWatch{limit: stallReports, stuck: func() { calls++ }}
	report := "[  110.690499] rcu: INFO: " + stallSignature + " on CPUs/tasks:\n"
	for i := 0; i < stallReports-1; i++ {
		w.Write([]byte(report))
	}
	if calls != 0 || w.tripped() {
		t.Fatalf("stopped after %d reports", stallReports-1)
	}
	half := len(report) / 2
	w.Write([]byte(report[:half]))
	w.Write([]byte(report[half:]))
	w.Write([]byte(report))
	if calls != 1 || !w.tripped() {
		t.Fatalf("after %d reports: %d calls, tripped %v", stallReports+1, calls, w.tripped())
	}
	if got := strings.Count(w.String(), stallSignature); got != stallReports+1 {
		t.Fatalf("console kept %d reports", got)
	}
}
