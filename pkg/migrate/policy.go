package migrate

import (
	"errors"
	"fmt"
	"math"
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
	// Throttle is the share of the guest's vCPU time (percent) QEMU's
	// auto-converge takes now; ThrottleCeiling the most the run lets it
	// take (as Downtime, stamped by the run).
	Throttle, ThrottleCeiling int
	// Measured is the dirty rate the run measured during the first pass
	// (bytes/s, 0: not yet): what the guest dirties in a second, unlike
	// DirtyRate, which cannot exceed what a pass leaves (stamped by the
	// run).
	Measured float64
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
	Bandwidth float64
	// Throttle: the guest's vCPUs may be slowed (QEMU's auto-converge)
	// when precopy cannot converge at the cap otherwise.
	Throttle   bool
	AllowPause bool
	// Shared: other migrations share the link (vgpuctl migrate --all
	// --parallel N), so this one's share of it changes as they start and
	// finish, between QEMU's estimate and the stop-copy it plans with it.
	// The limits set then stay sharedHeadroom under the cap.
	Shared  bool
	Devices []Device
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
	// margin: a limit this much above what the last pass needs, so that
	// QEMU's own estimate of the bandwidth does not miss it by a hair.
	margin = 1.2
	// planMargin: the same above what the measurement says: QEMU gives
	// it in whole MiB/s, rounded down, from a sample of pages (seen: 3 for
	// a set of 4 MiB rewritten 8 times a second), and a limit too low
	// costs two passes more, one too high only its excess.
	planMargin = 1.5
	// IdleThrottle is the throttle ceiling a run starts with: QEMU's
	// auto-converge must be on from the job's start to be of use later,
	// and at 1% it leaves the guest 99% of its vCPU time until the
	// policy needs more. MaxThrottle is QEMU's most.
	IdleThrottle = 1
	MaxThrottle  = 99
	// throttleTarget: a throttle aims at a dirty rate this share of the
	// bandwidth, where each pass halves the remainder.
	throttleTarget = 0.5
	// throttleWait is how many passes a throttle ceiling may wait to be
	// applied: QEMU's auto-converge acts after two passes that dirtied
	// more than half of what they sent.
	throttleWait = 3
	// throttledDowntime is the limit a throttled guest whose remainder
	// shrinks goes down to: half QEMU's default 300 ms, which virsh's
	// auto-converge stops at. QEMU stops the guest as soon as what remains
	// fits, so the downtime is about the limit: at 300 ms it could only
	// tie with auto-converge's. A remainder that shrinks under the
	// throttle reaches half of it in a pass or two more, each shorter
	// than the last.
	throttledDowntime = 150 * time.Millisecond
	// sharedHeadroom is the share of the cap kept free on a shared link:
	// a drain of four guests, each limit raised to a 1 s cap, stopped one
	// for 1028 ms (docs/benchmarks.md), its share having shrunk under the
	// stop-copy QEMU planned at the cap.
	sharedHeadroom = 0.2
)

// maxLimit is the highest downtime limit the policy sets: the cap, less
// sharedHeadroom when the link is shared.
func (l Limits) maxLimit() time.Duration {
	if l.Shared {
		return time.Duration((1 - sharedHeadroom) * float64(l.MaxDowntime))
	}
	return l.MaxDowntime
}

// capText names maxLimit for messages.
func (l Limits) capText() string {
	if l.Shared {
		return fmt.Sprintf("%s (the cap %s less the %.0f%% kept while other migrations share the link)", l.maxLimit(), l.MaxDowntime, 100*sharedHeadroom)
	}
	return l.MaxDowntime.String()
}

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
// (what the guest dirties in a second, bytes/s) and the bandwidth
// (bytes/s), and refuses up front a cap below what the devices' stop-copy
// state needs, or below what a guest that dirties faster than the link
// would need when neither a throttle nor a pause may help. It never starts
// above MaxDowntime (less sharedHeadroom on a shared link). why says how
// the figure was reached, for the log.
//
// The limit is what resending a second's dirt takes (plus the devices'
// state), with a margin (planMargin): a guest that rewrites a small set faster than the
// link leaves exactly that set at every pass, and the first pass's end is
// the earliest it can stop, at that limit; a guest that dirties slowly
// converges below it anyway, the limit only deciding how early it stops.
func Plan(l Limits, dirtyRate, bandwidth float64) (start time.Duration, why string, err error) {
	if l.MaxDowntime <= 0 {
		return 0, "", fmt.Errorf("the downtime cap must be positive, got %s", l.MaxDowntime)
	}
	floor, most := l.Floor(bandwidth), l.maxLimit()
	if floor > most {
		return 0, "", fmt.Errorf("%w: the devices move %s of state while the guest is stopped; at %s that takes %s, above the downtime cap %s (raise --max-downtime or --bandwidth)",
			ErrCannotConverge, mib(l.stopCopyBytes()), rate(bandwidth), floor.Round(time.Millisecond), l.capText())
	}
	need := max(minDowntime, floor+floor/4)
	bw := "libvirt's default bandwidth"
	if bandwidth > 0 {
		bw = "bandwidth " + rate(bandwidth)
	}
	why = fmt.Sprintf("dirty rate %s vs %s", rate(dirtyRate), bw)
	if bandwidth > 0 && dirtyRate > 0 {
		second := seconds(dirtyRate / bandwidth) // to resend a second's dirt
		need = max(need, floor+time.Duration(planMargin*float64(second)))
		if dirtyRate >= bandwidth && floor+second > most {
			// It dirties faster than the link sends and more than the cap
			// holds: the remainder cannot shrink to fit by precopy alone.
			why += ": faster than the link"
			if !l.Throttle && !l.AllowPause {
				return 0, why, fmt.Errorf("%w: the guest dirties %s, more than the %s the link sends; the last pass would take about %s, above the downtime cap %s (raise --max-downtime, let vgpuctl slow the guest (drop --no-throttle) or --allow-pause)",
					ErrCannotConverge, rate(dirtyRate), rate(bandwidth), (floor + second).Round(time.Millisecond), l.capText())
			}
		}
	}
	if floor > 0 {
		why += fmt.Sprintf("; device stop-copy floor %s", floor.Round(time.Millisecond))
	}
	return min(need, most), why, nil
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
	SetDowntime        // set the downtime limit to Decision.Downtime
	Throttle           // let QEMU take up to Decision.Throttle percent of the vCPUs
	Pause              // pause the guest so the last pass converges
	Abort              // give up: the VM stays on the source
)

func (a Action) String() string {
	return [...]string{"continue", "set-downtime", "throttle", "pause", "abort"}[a]
}

// Decision is the policy's answer to the samples so far.
type Decision struct {
	Action   Action
	Downtime time.Duration
	Throttle int
	Reason   string
}

// Decide is the convergence policy: given every sample so far (oldest
// first; the last is now), it keeps going while passes shrink the
// remainder, raises the downtime limit toward the cap when stallPasses
// passes in a row do not (one, when the guest dirties as fast as the link
// sends by QEMU's figure; none, when it dirties faster by the run's
// measurement and the remainder needs more than the cap), and at the cap
// slows the guest's vCPUs (when allowed): first to what brings the dirty
// rate to half the bandwidth, then halving what the guest keeps each time
// the throttle, applied, still leaves the remainder stuck. A throttled
// guest whose remainder shrinks gets the limit lowered to
// throttledDowntime, once, and held there by more throttle. With the
// throttle at its most, after as many more passes without progress, it
// pauses the guest (only when allowed and every device can be paused) or
// aborts with the reason. It acts only on the sample that starts a new
// pass.
func Decide(l Limits, samples []Sample) Decision {
	n := len(samples)
	if n == 0 {
		return Decision{Action: Continue}
	}
	cur := samples[n-1]
	if cur.Paused || n > 1 && cur.Iteration == samples[n-2].Iteration {
		return Decision{Action: Continue}
	}
	if cur.Iteration == 0 || cur.Total == 0 {
		return Decision{Action: Continue} // the job does not send yet (libvirt prepares the destination)
	}
	// The sample that starts each pass so far, with the most remaining in
	// the pass (QEMU syncs when the remainder falls below what the limit
	// holds, and a reading may come late in a pass), and the bandwidth
	// over the last pass (QEMU's figure is for 100 ms and jumps by a
	// third).
	var starts []Sample
	var sum float64
	var k int
	for i, s := range samples {
		if s.Iteration == 0 || s.Total == 0 {
			continue
		}
		if len(starts) == 0 || s.Iteration != starts[len(starts)-1].Iteration {
			starts = append(starts, s)
			if i < n-1 {
				sum, k = 0, 0
			}
		}
		last := &starts[len(starts)-1]
		last.Remaining = max(last.Remaining, s.Remaining)
		if s.Bandwidth > 0 {
			sum, k = sum+s.Bandwidth, k+1
		}
	}
	bw := l.Bandwidth
	if k > 0 {
		bw = sum / float64(k)
	}
	if bw <= 0 {
		return Decision{Action: Continue}
	}
	// Progress is the remainder above what the limit in force lets QEMU
	// stop at: QEMU syncs once what it has not sent falls below that, so
	// a converging remainder nears it from above and shrinks by less and
	// less, while what is above it keeps shrinking by the same share.
	excess := func(s Sample) float64 {
		return max(0, float64(s.Remaining)-bw*s.Downtime.Seconds())
	}
	stalled := 0 // passes in a row that did not improve on the best before them
	best := excess(starts[0])
	for _, s := range starts[1:] {
		if e := excess(s); e < progress*best {
			stalled = 0
		} else {
			stalled++
		}
		best = min(best, excess(s))
	}
	// The measured rate, as the throttle QEMU applies now leaves it.
	measured := cur.Measured * (1 - float64(cur.Throttle)/100)
	need := l.Floor(bw) + seconds(float64(cur.Remaining)/bw)
	// A throttled guest whose remainder shrinks converges at any limit,
	// and QEMU stops it as soon as the remainder fits, so the downtime is
	// about the limit: down to throttledDowntime, under auto-converge's
	// 300 ms, once (raised again, the remainder had stopped shrinking
	// there).
	throttled := cur.ThrottleCeiling > IdleThrottle && cur.Throttle >= cur.ThrottleCeiling
	most := l.maxLimit()
	low := min(most, max(throttledDowntime, minDowntime, l.Floor(bw)*5/4))
	lowered := false
	for _, s := range starts {
		lowered = lowered || s.ThrottleCeiling > IdleThrottle && s.Downtime <= low
	}
	if throttled && stalled == 0 && len(starts) > 1 && cur.Downtime > low && !lowered {
		return Decision{Action: SetDowntime, Downtime: low,
			Reason: fmt.Sprintf("%s remaining, less than the pass before, with the guest's vCPUs throttled %d%%; downtime limit %s -> %s (a few more short passes)",
				mib(cur.Remaining), cur.Throttle, cur.Downtime.Round(time.Millisecond), low.Round(time.Millisecond))}
	}
	// The guest dirties at least as fast as the link sends: by QEMU's
	// figure for the last pass (which cannot exceed what the pass left,
	// so near the bandwidth says it), or by the run's measurement.
	measuredFaster := measured >= bw
	faster := cur.DirtyRate >= progress*bw || measuredFaster
	switch {
	case stalled >= stallPasses, faster && stalled >= 1:
	case measuredFaster && need > most && cur.Downtime >= most:
		// No pass will shrink it: no need to watch one fail.
	default:
		return Decision{Action: Continue}
	}
	if need <= cur.Downtime {
		return Decision{Action: Continue} // it fits: QEMU stops the guest at the end of this pass
	}
	facts := fmt.Sprintf("%s remaining has not shrunk for %s (dirty %s vs %s sent)",
		mib(cur.Remaining), passes(stalled), rate(max(cur.DirtyRate, measured)), rate(bw))
	if stalled == 0 {
		facts = fmt.Sprintf("%s remaining and the guest dirtying faster than the link (measured %s vs %s sent)", mib(cur.Remaining), rate(measured), rate(bw))
	}
	// A throttled guest stuck at the limit lowered for it gets more
	// throttle before the limit goes back up: the downtime stays short,
	// and a harder throttle loses less work than a long one at a throttle
	// too soft to converge.
	held := lowered && cur.Downtime <= low && l.Throttle && cur.ThrottleCeiling < MaxThrottle
	if cur.Downtime < most && !held {
		next := min(most, max(cur.Downtime*3/2, time.Duration(margin*float64(need))))
		return Decision{Action: SetDowntime, Downtime: next,
			Reason: fmt.Sprintf("%s; downtime limit %s -> %s", facts, cur.Downtime.Round(time.Millisecond), next.Round(time.Millisecond))}
	}
	// At the cap (or held). Passes so far under the limit and ceiling in
	// force now, and under the throttle QEMU applies now.
	same, applied := 0, 0
	for i := len(starts) - 1; i >= 0 && starts[i].Downtime == cur.Downtime && starts[i].ThrottleCeiling == cur.ThrottleCeiling; i-- {
		same++
		if starts[i].Throttle >= cur.ThrottleCeiling {
			applied++
		}
	}
	wait := stallPasses
	if faster {
		wait = 1
	}
	if l.Throttle && cur.ThrottleCeiling < MaxThrottle {
		if cur.ThrottleCeiling > IdleThrottle && same <= throttleWait && (cur.Throttle < cur.ThrottleCeiling || applied < wait) {
			return Decision{Action: Continue} // QEMU applies it at its next trigger; then let it show
		}
		next := cur.ThrottleCeiling + (100-cur.ThrottleCeiling)/2
		if cur.ThrottleCeiling <= IdleThrottle {
			// The guest's own rate: the measurement's, or QEMU's figure.
			next = max(next, throttleFor(max(cur.DirtyRate, measured), bw))
		}
		next = min(MaxThrottle, next)
		return Decision{Action: Throttle, Throttle: next,
			Reason: fmt.Sprintf("%s at the downtime limit %s (cap %s); slowing the guest's vCPUs: throttle up to %d%% (QEMU applies %d%%)",
				facts, cur.Downtime.Round(time.Millisecond), l.capText(), next, cur.Throttle)}
	}
	if same <= wait {
		return Decision{Action: Continue}
	}
	why := fmt.Sprintf("%s at the downtime cap %s", facts, l.capText())
	if l.Throttle {
		why += fmt.Sprintf(" with the guest's vCPUs throttled %d%%", cur.Throttle)
	}
	why += fmt.Sprintf("; finishing now would take about %s", need.Round(time.Millisecond))
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

// throttleFor is the throttle (percent) that brings a guest dirtying
// dirty bytes/s, as fast as its vCPUs run, to throttleTarget of bw.
func throttleFor(dirty, bw float64) int {
	if dirty <= 0 || bw <= 0 {
		return 0
	}
	return int(math.Ceil(100 * (1 - throttleTarget*bw/dirty)))
}

func passes(n int) string {
	if n == 1 {
		return "1 pass"
	}
	return fmt.Sprintf("%d passes", n)
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func rate(bps float64) string { return fmt.Sprintf("%.1f MiB/s", bps/(1<<20)) }
