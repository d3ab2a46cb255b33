package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rss reads a process's resident memory in kB from /proc/PID/status:
// VmRSS, and its anonymous and file-backed parts.
func rss(pid int) (total, anon, file int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	fields := map[string]*int{"VmRSS:": &total, "RssAnon:": &anon, "RssFile:": &file}
	for _, line := range strings.Split(string(b), "\n") {
		for k, v := range fields {
			if rest, ok := strings.CutPrefix(line, k); ok {
				if *v, err = strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB"))); err != nil {
					return 0, 0, 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, k, err)
				}
				delete(fields, k)
			}
		}
	}
	if len(fields) > 0 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/status lacks %d of VmRSS, RssAnon, RssFile", pid, len(fields))
	}
	return total, anon, file, nil
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
	var kb, anon, file int
	for b.Loop() {
		var err error
		if kb, anon, file, err = rss(h.agent.Pid()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(kb)/1024, "RSS-MiB")
	b.ReportMetric(float64(anon)/1024, "anon-MiB")
	b.ReportMetric(float64(file)/1024, "file-MiB")
}
