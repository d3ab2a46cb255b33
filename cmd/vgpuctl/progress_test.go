package main

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/migrate"
)

// The progress line names the phase: a precopy pass, or stop-copy once
// QEMU has stopped the guest to save the rest (the downtime runs).
func TestProgressLinePhase(t *testing.T) {
	p := &progress{domain: "web01", mu: new(sync.Mutex)}
	s := migrate.Sample{Iteration: 3, Total: 2 << 30, Remaining: 64 << 20, DirtyRate: 8 << 20, Bandwidth: 100 << 20,
		DeviceBytes: 4096, Downtime: 300 * time.Millisecond}
	line := p.line(migrate.Event{Sample: &s, ETA: 2 * time.Second})
	for _, want := range []string{"web01: migrate pass 3", "RAM left 64.0 MiB of 2048.0 MiB", "dirty 8.0 MiB/s vs 100.0 MiB/s", "device 4096 B", "limit 300ms", "ETA 2s"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "throttle") {
		t.Errorf("line %q names a throttle QEMU does not apply", line)
	}
	s.StopCopy, s.Throttle = true, 50
	if line := p.line(migrate.Event{Sample: &s}); !strings.Contains(line, "web01: stop-copy after pass 3 (guest stopped)") || strings.Contains(line, "migrate pass") ||
		!strings.Contains(line, "limit 300ms  throttle 50%") {
		t.Errorf("stop-copy line %q", line)
	}
}
