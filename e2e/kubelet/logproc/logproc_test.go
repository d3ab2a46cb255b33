package logproc

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStop(t *testing.T) {
	dir := t.TempDir()
	// A process that exits on SIGTERM: stopped without an error, its
	// output in the log.
	p, err := Start("sleeper", exec.Command("sh", "-c", "echo up; exec sleep 60"), filepath.Join(dir, "sleeper.log"))
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(Tail(p.Log, 5), "up") {
		time.Sleep(10 * time.Millisecond)
	}
	if !p.Running() {
		t.Fatal("the sleeper is not running")
	}
	if err := p.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Fatal("the sleeper runs on after Stop")
	}
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("a second Stop: %v", err)
	}
	// One that ignores SIGTERM is killed after the grace period, and
	// Stop says so.
	p, err = Start("stubborn", exec.Command("sh", "-c", "trap '' TERM; echo up; while :; do sleep 1; done"), filepath.Join(dir, "stubborn.log"))
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(Tail(p.Log, 5), "up") {
		time.Sleep(10 * time.Millisecond)
	}
	err = p.Stop(100 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "stubborn ignored SIGTERM") {
		t.Fatalf("Stop of a process that ignores SIGTERM: %v", err)
	}
	if p.Running() {
		t.Fatal("the stubborn process runs on after Stop")
	}
	var nilProc *Proc
	if nilProc.Running() {
		t.Fatal("a nil Proc is running")
	}
}

func TestTail(t *testing.T) {
	dir := t.TempDir()
	p, err := Start("counter", exec.Command("seq", "1", "100"), filepath.Join(dir, "counter.log"))
	if err != nil {
		t.Fatal(err)
	}
	for p.Running() {
		time.Sleep(10 * time.Millisecond)
	}
	want := "--- " + p.Log + ", last 3 lines:\n98\n99\n100"
	if got := Tail(p.Log, 3); got != want {
		t.Fatalf("Tail = %q, want %q", got, want)
	}
	if got := Tail(filepath.Join(dir, "absent.log"), 3); !strings.HasPrefix(got, "(open ") {
		t.Fatalf("Tail of a missing file = %q", got)
	}
}
