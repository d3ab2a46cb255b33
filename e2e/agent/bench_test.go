package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// vmRSS reads a process's resident set size in kB from /proc.
func vmRSS(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// BenchmarkRSSAtRest starts vgpud on the simulated mixed host, lets it
// carve and settle, and reports its resident memory.
func BenchmarkRSSAtRest(b *testing.B) {
	h := newHost(b, "mixed.yaml", cfgMixed)
	h.startAgent()
	if _, err := h.c.VGPUs(bg); err != nil { // one request served, as at rest in production
		b.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	var kb int
	for b.Loop() {
		var err error
		if kb, err = vmRSS(h.agent.Pid()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(kb)/1024, "RSS-MiB")
}
