// Package migrate moves a running domain with its vGPUs to another host:
// the convergence policy (this file, a pure function over job-stat
// samples), the checks before anything moves, and the run that drives a
// libvirt migration job through the policy, with rollback.
package migrate

import (
	"errors"
	"fmt"
	"time"
)

// Sample is one reading of the migration job on the source
// (virDomainGetJobStats), the facts the policy decides on.
type Sample struct {
	Elapsed time.Duration
	// Iteration counts RAM passes; the policy decides at pass boundaries.
	Iteration uint64
	// Total and Remaining are RAM bytes.
	Total, Remaining uint64
	// DirtyRate is bytes/s the guest dirties, Bandwidth bytes/s sent
	// (QEMU's own figures for the last pass).
	DirtyRate, Bandwidth float64
	// DeviceBytes is VFIO device state sent so far.
	DeviceBytes uint64
	// Downtime is the limit in force.
	Downtime time.Duration
	// Paused: the guest was paused to finish.
	Paused bool
	// StopCopy: QEMU has stopped the guest and saves the rest, the
	// devices' stop-copy state included (query-migrate status "device"):
	// the downtime is running.
	StopCopy bool
}

// Device is what the catalog says about how one vGPU migrates.
type Device struct {
	ID string
	// Driver names the vendor driver, for messages.
	Driver string
	// StopCopyBytes is the device state that moves only once the guest
	// is stopped: the whole state for a device without precopy.
	StopCopyBytes uint64
	// NoPause: the vendor driver cannot migrate a paused guest (NVIDIA).
	NoPause bool
	// DirtyTracking is how QEMU learns which pages the device wrote:
	// "device" (DMA logging), "iommu", or "none" (every pinned page
	// counts as dirty at every pass).
	DirtyTracking string
}

// Limits are what the user and the devices allow.
type Limits struct {
	MaxDowntime time.Duration
	// Bandwidth is the cap given to libvirt in bytes/s (0: none).
	Bandwidth  float64
	AllowPause bool
	Devices    []Device
}

// ErrCannotConverge: the migration cannot finish within the limits.
var ErrCannotConverge = errors.New("cannot converge")

// Planning constants.
const (
	// minDowntime: below this QEMU's own stop and resume dominate.
	minDowntime = 50 * time.Millisecond
	// stallPasses: passes without progress before the policy acts.
	stallPasses = 2
	// progress: a pass that leaves less than this share of the best
	// remainder so far made progress.
	progress = 0.9
)

// Floor is the downtime the devices' stop-copy state costs at bandwidth
// (bytes/s): it moves while the guest is stopped, whatever the RAM does.
func (l Limits) Floor(bandwidth float64) time.Duration {
	var b uint64
	for _, d := range l.Devices {
		b += d.StopCopyBytes
	}
	if b == 0 || bandwidth <= 0 {
		return 0
	}
	return seconds(float64(b) / bandwidth)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Plan picks the downtime limit to start at from the dirty rate measured
// before the migration and the bandwidth (bytes/s), and refuses up front a
// cap below what the devices' stop-copy state needs. It never starts above
// MaxDowntime. why says how the figure was reached, for the log.
func Plan(l Limits, dirtyRate, bandwidth float64) (start time.Duration, why string, err error) {
	if l.MaxDowntime <= 0 {
		return 0, "", fmt.Errorf("the downtime cap must be positive, got %s", l.MaxDowntime)
	}
	floor := l.Floor(bandwidth)
	if floor > l.MaxDowntime {
		return 0, "", fmt.Errorf("%w: the devices move %s of state while the guest is stopped; at %s that takes %s, above the downtime cap %s (raise --max-downtime or --bandwidth)",
			ErrCannotConverge, mib(l.stopCopyBytes()), rate(bandwidth), floor.Round(time.Millisecond), l.MaxDowntime)
	}
	// A guest dirtying slower than the link converges at any limit; one
	// dirtying faster leaves about a second's worth of dirty pages per
	// pass, which must fit in the downtime.
	need := max(minDowntime, floor+floor/4)
	bw := "libvirt's default bandwidth"
	if bandwidth > 0 {
		bw = "bandwidth " + rate(bandwidth)
	}
	why = fmt.Sprintf("dirty rate %s vs %s", rate(dirtyRate), bw)
	if bandwidth > 0 && dirtyRate >= progress*bandwidth {
		need = max(need, floor+seconds(dirtyRate/bandwidth))
		why += ": precopy alone will not shrink the remainder"
	}
	if floor > 0 {
		why += fmt.Sprintf("; device stop-copy floor %s", floor.Round(time.Millisecond))
	}
	return min(need, l.MaxDowntime), why, nil
}

func (l Limits) stopCopyBytes() uint64 {
	var b uint64
	for _, d := range l.Devices {
		b += d.StopCopyBytes
	}
	return b
}

// Action is what the policy asks of the job.
type Action int

const (
	Continue    Action = iota
	SetDowntime        // raise the downtime limit to Decision.Downtime
	Pause              // pause the guest so the last pass converges
	Abort              // give up: the VM stays on the source
)

func (a Action) String() string {
	return [...]string{"continue", "set-downtime", "pause", "abort"}[a]
}

// Decision is the policy's answer to the samples so far.
type Decision struct {
	Action   Action
	Downtime time.Duration
	Reason   string
}

// Decide is the convergence policy: given every sample so far (oldest
// first; the last is now), it keeps going while passes shrink the
// remainder, raises the downtime limit step by step toward the cap when
// stallPasses passes in a row do not, and at the cap, after as many more
// passes without progress, pauses the guest (only when allowed and every
// device can be paused) or aborts with the reason. It acts only on the
// sample that starts a new pass.
func Decide(l Limits, samples []Sample) Decision {
	n := len(samples)
	if n == 0 {
		return Decision{Action: Continue}
	}
	cur := samples[n-1]
	if cur.Paused || n > 1 && cur.Iteration == samples[n-2].Iteration {
		return Decision{Action: Continue}
	}
	// The remainder at the start of each pass so far.
	var rem []uint64
	var at []time.Duration
	for i, s := range samples {
		if i == 0 || s.Iteration != samples[i-1].Iteration {
			rem = append(rem, s.Remaining)
			at = append(at, s.Downtime)
		}
	}
	stalled := 0 // passes in a row that did not improve on the best before them
	best := rem[0]
	for i := 1; i < len(rem); i++ {
		if float64(rem[i]) < progress*float64(best) {
			stalled = 0
		} else {
			stalled++
		}
		best = min(best, rem[i])
	}
	if stalled < stallPasses {
		return Decision{Action: Continue}
	}
	bw := cur.Bandwidth
	if bw <= 0 {
		bw = l.Bandwidth
	}
	if bw <= 0 {
		return Decision{Action: Continue, Reason: "no bandwidth figure yet"}
	}
	need := l.Floor(bw) + seconds(float64(cur.Remaining)/bw)
	if need <= cur.Downtime {
		return Decision{Action: Continue} // it fits: QEMU stops the guest at the end of this pass
	}
	facts := fmt.Sprintf("%s remaining has not shrunk for %d passes (dirty %s vs %s sent)",
		mib(cur.Remaining), stalled, rate(cur.DirtyRate), rate(bw))
	if cur.Downtime < l.MaxDowntime {
		next := min(l.MaxDowntime, max(cur.Downtime*3/2, need+need/5))
		return Decision{Action: SetDowntime, Downtime: next,
			Reason: fmt.Sprintf("%s; downtime limit %s -> %s", facts, cur.Downtime.Round(time.Millisecond), next.Round(time.Millisecond))}
	}
	// At the cap: wait as many passes again before giving up.
	atCap := 0
	for i := len(at) - 1; i >= 0 && at[i] >= l.MaxDowntime; i-- {
		atCap++
	}
	if atCap <= stallPasses {
		return Decision{Action: Continue}
	}
	why := fmt.Sprintf("%s at the downtime cap %s; finishing now would take about %s", facts, l.MaxDowntime, need.Round(time.Millisecond))
	if l.AllowPause {
		for _, d := range l.Devices {
			if d.NoPause {
				return Decision{Action: Abort, Reason: fmt.Sprintf("%s; --allow-pause cannot help: vGPU %s (%s) cannot migrate a paused guest", why, d.ID, d.Driver)}
			}
		}
		return Decision{Action: Pause, Reason: why + "; pausing the guest (--allow-pause)"}
	}
	return Decision{Action: Abort, Reason: why + " (raise --max-downtime or --bandwidth, or --allow-pause)"}
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func rate(bps float64) string { return fmt.Sprintf("%.1f MiB/s", bps/(1<<20)) }
