package uevent

import (
	"context"
	"os"
	"testing"
	"time"
)

// The kernel sends a uevent for a write of "change" to a device's uevent
// file (kobject_synth_uevent): the listener hears it from the real kernel.
func TestListenHearsTheKernel(t *testing.T) {
	const dev = "/sys/devices/virtual/mem/null"
	if os.Getuid() != 0 {
		t.Skip("writing a device's uevent file needs root")
	}
	l, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan Event, 16)
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx, func(e Event) { got <- e }, "mem") }()
	if err := os.WriteFile(dev+"/uevent", []byte("change"), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		if e.Action != "change" || e.DevPath != "/devices/virtual/mem/null" || e.Subsystem != "mem" {
			t.Errorf("event = %+v", e)
		}
	case <-ctx.Done():
		t.Fatal("no uevent within 30 s of the write (is this process outside the host's network namespace?)")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after ctx ended: %v", err)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Event
		ok   bool
	}{
		{"remove@/devices/pci0000:00/0000:00:02.0/0000:03:00.0\x00ACTION=remove\x00DEVPATH=/devices/pci0000:00/0000:00:02.0/0000:03:00.0\x00SUBSYSTEM=pci\x00SEQNUM=5\x00",
			Event{"remove", "/devices/pci0000:00/0000:00:02.0/0000:03:00.0", "pci"}, true},
		{"libudev\x00junk", Event{}, false},
		{"", Event{}, false},
	} {
		got, ok := parse([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parse(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
