package libvirt

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/e2e/internal/simproc"
)

// jobInfo is what `virsh domjobinfo` says of a domain's job: the running
// one, or with completed the last finished one (on the destination after
// a migration: libvirt's figures for the whole job).
type jobInfo struct {
	active    bool
	elapsed   time.Duration
	downtime  time.Duration // completed: from the source's stop to the destination's resume
	iteration uint64
	processed uint64 // bytes of memory sent
	remaining uint64 // bytes of memory left (running)
	bandwidth float64
}

func (r *rig) job(name string, completed bool) (jobInfo, error) {
	args := []string{"domjobinfo", name}
	if completed {
		args = append(args, "--completed", "--keep-completed")
	}
	out, _, err := r.virsh(args...)
	if err != nil {
		return jobInfo{}, err
	}
	var j jobInfo
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Job type":
			j.active = f[0] == "Unbounded" || f[0] == "Bounded" || completed && f[0] == "Completed"
		case "Time elapsed":
			j.elapsed, err = millis(f)
		case "Total downtime":
			j.downtime, err = millis(f)
		case "Iteration":
			j.iteration, err = strconv.ParseUint(f[0], 10, 64)
		case "Memory processed":
			j.processed, err = size(f)
		case "Memory remaining":
			j.remaining, err = size(f)
		case "Memory bandwidth":
			var b uint64
			b, err = size(f)
			j.bandwidth = float64(b)
		}
		if err != nil {
			return j, fmt.Errorf("domjobinfo %s: %q: %w", name, l, err)
		}
	}
	return j, nil
}

func millis(f []string) (time.Duration, error) {
	ms, err := strconv.ParseUint(f[0], 10, 64)
	return time.Duration(ms) * time.Millisecond, err
}

// size reads virsh's "12.500 MiB" (or "MiB/s").
func size(f []string) (uint64, error) {
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || len(f) < 2 {
		return 0, fmt.Errorf("not a size: %v", f)
	}
	unit := strings.TrimSuffix(f[1], "/s")
	mult := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("unknown unit %q", f[1])
	}
	return uint64(v * mult), nil
}

// batches reads the tiny guest's count of 64 KiB batches written over
// its working set (guest/dirty.S, BATCHES) through the monitor.
func (r *rig) batches(name string) (uint64, error) { return r.guestWord(name, 0xfff024) }

// guestWord reads the 32-bit word at physical address addr of the guest.
func (r *rig) guestWord(name string, addr uint64) (uint64, error) {
	out, _, err := r.virsh("qemu-monitor-command", name, "--hmp", fmt.Sprintf("xp /1wu %#x", addr))
	if err != nil {
		return 0, err
	}
	_, v, ok := strings.Cut(out, ":")
	if !ok {
		return 0, fmt.Errorf("xp of %s: %q", name, out)
	}
	return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
}

// awaitGuest waits until the tiny guest has filled its RAM and runs its
// working set (guest/dirty.S, READY).
func (r *rig) awaitGuest(tb testing.TB, name string) {
	tb.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		v, err := r.guestWord(name, 0xfff02c)
		if err == nil && v == 1 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the tiny guest %s is not ready after 2 minutes: %d %v", name, v, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startMigrate starts `virsh migrate --live --p2p` of name from r to dst
// with flags (in r's namespaces, so over the link when there is one); the
// channel gets its end, out what it said.
func (r *rig) startMigrate(tb testing.TB, dst *rig, name string, flags ...string) (ended <-chan error, out *simproc.LockedBuffer) {
	tb.Helper()
	c := r.nsenter("virsh", append([]string{"-c", r.uri, "migrate", "--live", "--p2p", "--persistent", "--undefinesource",
		name, dst.tcpURI, dst.migURI}, flags...)...)
	out = new(simproc.LockedBuffer)
	c.Stdout, c.Stderr = out, out
	if err := c.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	return done, out
}
