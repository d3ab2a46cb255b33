package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/internal/benchstat"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
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

// sample runs f n times, or fewer when budget runs out, and returns the
// times of those that succeeded and how many failed.
func sample(n int, budget time.Duration, f func() (time.Duration, error)) (took []time.Duration, failed int) {
	end := time.Now().Add(budget)
	for i := 0; i < n && time.Now().Before(end); i++ {
		d, err := f()
		if err != nil {
			failed++
			continue
		}
		took = append(took, d)
	}
	return took, failed
}

// p50p99 adds the p50 and p99 of ds, in milliseconds, as prefix+"p50-ms"
// and prefix+"p99-ms".
func p50p99(b *testing.B, ds []time.Duration, prefix string) {
	b.ReportMetric(benchstat.Ms(benchstat.Quantile(ds, 0.5)), prefix+"p50-ms")
	b.ReportMetric(benchstat.Ms(benchstat.Quantile(ds, 0.99)), prefix+"p99-ms")
}

// cpuTime is the CPU time pid has used, from /proc/PID/stat (utime and
// stime, in clock ticks of 10 ms).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	var ticks int
	for _, s := range f[11:13] {
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// BenchmarkHeldConnections measures what root and the hook see while an
// unprivileged member of the socket group holds 2000 connections to vgpud
// (e2e/internal/connhold as nobody: idle, slow-header, slow-body and
// keep-alive ones, each opened again a second after vgpud closes it, and
// extra requests of its own): GET /v1/health as root on a new connection
// each, and the hook's prepare (the API call on a new connection, then a
// release that keeps the mdev; hook-ms times the vgpu-hook binary, its
// prepare after its release, idle-hook-ms the same without the holder), first
// without the holder, then with it; and vgpud's resident memory at rest
// and at most under the holder. Each call gives up after 30 s, and each
// series after 2 min (a vgpud that stalls, as before the gate, reports
// fewer samples and the failures). vgpud-cores and holder-cores are the
// CPU each used while the holder held (the holder's over its whole run).
func BenchmarkHeldConnections(b *testing.B) {
	h := newHost(b, "mixed.yaml", cfgHeld)
	if err := os.Chmod(h.dir, 0o711); err != nil {
		b.Fatal(err)
	}
	h.startAgent()
	health := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		defer cancel()
		return rootHealth(ctx, h.socket)
	}
	prepare := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		defer cancel()
		c := client.New(h.socket)
		defer c.Close()
		start := time.Now()
		_, err := c.Prepare(ctx, domB, api.PrepareRequest{Name: "db01", Profile: "t4-4q", VGPUs: []string{mdevB0}})
		took := time.Since(start)
		if err == nil {
			_, err = c.Release(ctx, domB, api.ReleaseRequest{Name: "db01"})
		}
		return took, err
	}
	hook := func() (time.Duration, error) {
		d, err := h.runHook("prepare", "begin")
		if err == nil {
			_, err = h.runHook("release", "end")
		}
		return d, err
	}
	if _, err := prepare(); err != nil { // the swap that makes db01's mdev: not what is measured
		b.Fatal(err)
	}
	rest, _, _, err := rss(h.agent.Pid())
	if err != nil {
		b.Fatal(err)
	}
	var idleHealth, idlePrepare, idleHook, heldHealth, heldPrepare, heldHook []time.Duration
	var failed, peak int
	var rep holdReport
	var held, vgpudCPU, holderCPU time.Duration
	for b.Loop() {
		idleHealth, _ = sample(200, 2*time.Minute, health)
		idlePrepare, _ = sample(30, 2*time.Minute, prepare)
		idleHook, _ = sample(10, 2*time.Minute, hook)
		hold := startHolder(b, h.socket, 2000)
		stopRSS := peakRSS(b, h.agent.Pid())
		cpu0, _ := cpuTime(h.agent.Pid())
		start := time.Now()
		var f1, f2, f3 int
		heldHealth, f1 = sample(200, 2*time.Minute, health)
		heldPrepare, f2 = sample(30, 2*time.Minute, prepare)
		heldHook, f3 = sample(10, 2*time.Minute, hook)
		failed = f1 + f2 + f3
		held = time.Since(start)
		cpu1, _ := cpuTime(h.agent.Pid())
		vgpudCPU = cpu1 - cpu0
		peak = stopRSS()
		rep = hold.stop(b)
		holderCPU = hold.cmd.ProcessState.UserTime() + hold.cmd.ProcessState.SystemTime()
	}
	p50p99(b, heldHealth, "health-")
	p50p99(b, heldPrepare, "prepare-")
	p50p99(b, heldHook, "hook-")
	b.ReportMetric(float64(failed), "failed")
	p50p99(b, idleHealth, "idle-health-")
	p50p99(b, idlePrepare, "idle-prepare-")
	p50p99(b, idleHook, "idle-hook-")
	b.ReportMetric(float64(rest)/1024, "rest-RSS-MiB")
	b.ReportMetric(float64(peak)/1024, "RSS-MiB")
	b.ReportMetric(float64(rep.Extra["refused"]+rep.Extra["closed"]), "holder-extra-refused")
	b.ReportMetric(float64(rep.Extra["served"]), "holder-extra-served")
	// Of the 2 cores, what vgpud and the holder used while it held.
	b.ReportMetric(vgpudCPU.Seconds()/held.Seconds(), "vgpud-cores")
	b.ReportMetric(holderCPU.Seconds()/held.Seconds(), "holder-cores")
	b.Logf("samples under the holder: health %d, prepare %d, hook %d; holder %+v", len(heldHealth), len(heldPrepare), len(heldHook), rep)
}

// BenchmarkHonestLoad: 200 callers at once (as 200 VM starts would), each
// with connections of its own, reserve a vGPU for a domain of their own
// and unreserve it, 5 times over, on 16 vGPUs; each call gives up after
// 2 min, as the callers did. p50 and p99 are of every call,
// reservations and unreservations; errors are calls without an answer.
func BenchmarkHonestLoad(b *testing.B) {
	h := newHost(b, "mi25.yaml", "version: v1\ngpus:\n  - address: \"0000:03:00.0\"\n    profile: mi25-1g\n")
	h.startAgent()
	var calls []call
	var wall time.Duration
	for b.Loop() {
		start := time.Now()
		calls = honestLoad(h.socket, "mi25-1g", 200, 5, 2*time.Minute)
		wall = time.Since(start)
	}
	var took []time.Duration
	errs, refused := 0, 0
	for _, c := range calls {
		took = append(took, c.took)
		switch {
		case c.transport:
			errs++
		case c.err != nil && !errors.Is(c.err, client.ErrNoCapacity):
			refused++
		}
	}
	p50p99(b, took, "")
	b.ReportMetric(float64(len(calls)), "calls")
	b.ReportMetric(float64(errs), "transport-errors")
	b.ReportMetric(float64(refused), "error-answers")
	b.ReportMetric(wall.Seconds(), "wall-s")
	if a, err := h.c.Allocations(bg); err == nil {
		b.ReportMetric(float64(len(a.Allocations)), "left-held")
	}
}
