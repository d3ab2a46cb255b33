package migrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vgpu-project/vgpu/internal/revert"
)

// Source is the domain on the source host as the run drives it (libvirt
// through pkg/virt in production, a fake in tests).
type Source interface {
	// DirtyRate measures how fast the guest dirties memory (bytes/s)
	// over period, before anything moves.
	DirtyRate(ctx context.Context, period time.Duration) (float64, error)
	// SetDowntime changes the job's downtime limit. ErrNoAnswer: not
	// answered in time, but the change goes on and lands after every
	// change asked before it.
	SetDowntime(time.Duration) error
	// Throttle lets QEMU's auto-converge (on since the job started, when
	// Limits.Throttle) take up to pct percent of the guest's vCPU time; 0
	// gives QEMU's own settings back (the job ended on the source).
	Throttle(pct int) error
	// Migrate runs the migration and returns when libvirt's job ends: nil
	// once the domain runs on the destination.
	Migrate(ctx context.Context) error
	// Stats reads the job; active is false when no job runs. A job that
	// has failed, been cancelled or completed but that libvirt still
	// holds (it finishes with the destination first, and refuses any other
	// migration of the domain meanwhile) answers ErrEnding.
	Stats() (s Sample, active bool, err error)
	Pause() error
	Abort() error
	// Running reports whether the domain runs on the source.
	Running() (bool, error)
}

// Dest is the domain on the destination host.
type Dest interface {
	// Running reports whether the domain runs on the destination.
	Running() (bool, error)
	// Finish makes the destination's persistent definition carry the vGPUs
	// the domain runs with there (never the source's addresses), and
	// returns the completed job's figures.
	Finish(ctx context.Context) (Completed, error)
}

// Ledger is the source vgpud's record of the domain's vGPUs.
type Ledger interface {
	// Begin marks them migrating out: nothing else touches them.
	Begin(ctx context.Context) error
	// Commit frees them: the domain left.
	Commit(ctx context.Context) error
	// Rollback marks them attached again: the VM runs on the source.
	Rollback(ctx context.Context) error
	// Migrating reports whether an earlier run left them migrating.
	Migrating(ctx context.Context) (bool, error)
}

// Completed is what QEMU measured for the finished job.
type Completed struct {
	Downtime              time.Duration
	RAMBytes, DeviceBytes uint64
	Iterations            uint64
	// DeviceSet and IterateSet: libvirt reported those figures (older
	// libvirt has no VFIO figure; the last sample's is used then).
	DeviceSet, IterateSet bool
}

// Phases of a run, in order.
const (
	PhaseResolve  = "resolve"  // an earlier run was interrupted: settle it
	PhaseReserve  = "reserve"  // the source marks the vGPUs migrating out
	PhaseMeasure  = "measure"  // the guest's dirty rate
	PhaseMigrate  = "migrate"  // libvirt's job runs: precopy, then stop-copy
	PhaseFinish   = "finish"   // destination definition, source freed
	PhaseDone     = "done"     // the VM runs on the destination
	PhaseRollback = "rollback" // the VM runs on the source again
)

// Event is one fact of a run, for the progress line and -o json.
type Event struct {
	Time     time.Time     `json:"time"`
	Phase    string        `json:"phase"`
	Message  string        `json:"message,omitempty"`
	Sample   *Sample       `json:"sample,omitempty"`
	ETA      time.Duration `json:"etaNs,omitempty"`
	Decision string        `json:"decision,omitempty"`
	Result   *Result       `json:"result,omitempty"`
}

// Result sums a run up.
type Result struct {
	Outcome string `json:"outcome"` // migrated, resolved, aborted, failed
	// Total is the wall time of the run; Downtime QEMU's measurement.
	Total       time.Duration `json:"totalNs"`
	Downtime    time.Duration `json:"downtimeNs"`
	RAMBytes    uint64        `json:"ramBytes"`
	DeviceBytes uint64        `json:"deviceBytes"`
	Iterations  uint64        `json:"iterations"`
	// Decisions are the policy's escalations, in order, with reasons.
	Decisions []string `json:"decisions,omitempty"`
	// Start is the downtime limit the run started at, and why.
	Start     time.Duration `json:"startDowntimeNs"`
	StartWhy  string        `json:"startWhy,omitempty"`
	DirtyRate float64       `json:"measuredDirtyRate"`
	// Throttle is the most of the guest's vCPU time (percent) QEMU's
	// auto-converge took, as the job figures showed it.
	Throttle int `json:"throttle,omitempty"`
}

// Options tune a run.
type Options struct {
	Limits  Limits
	Timeout time.Duration // 0: none
	// Poll is how often the job is read (500 ms); Measure how long the
	// dirty rate is measured (1 s; 0 skips it).
	Poll, Measure time.Duration
	// Blind is how long the job may go without a reading (Stats answers
	// ErrNoAnswer) before the run aborts: a cap it cannot see is no cap
	// (30 s).
	Blind  time.Duration
	Report func(Event)
	Now    func() time.Time
}

// Errors of a run. Both leave the VM running on the source and the ledger
// as it was before the run.
var (
	// ErrAborted: the run gave up (the policy, the timeout, an interrupt).
	ErrAborted = errors.New("migration aborted and rolled back; the VM still runs on the source")
	// ErrFailed: libvirt or the destination failed the migration.
	ErrFailed = errors.New("migration failed and was rolled back; the VM still runs on the source")
	// ErrUndo: a rollback or the finish failed; the error says what is left.
	ErrUndo = errors.New("migration left unfinished")
	// ErrNoAnswer: the hypervisor did not answer in time (QEMU's monitor
	// is busy). From Source.Stats: the watch skips that sample and asks
	// again. From Source.SetDowntime: the change goes on and lands, after
	// any asked before it.
	ErrNoAnswer = errors.New("no answer from the hypervisor yet")
	// ErrEnding: Source.Stats found a migration job that has ended (failed,
	// cancelled) but that libvirt still holds while it finishes with the
	// destination; no other migration of the domain can start before
	// libvirt lets go of it.
	ErrEnding = errors.New("the job has ended, but libvirt still holds it")
)

type run struct {
	src  Source
	dst  Dest
	led  Ledger
	o    Options
	t0   time.Time
	res  Result
	samp []Sample
	// limit is the downtime limit in force and ceiling the throttle
	// ceiling: libvirt's job figures do not carry them, so the run stamps
	// them on every sample.
	limit   time.Duration
	ceiling int
	// measured delivers the dirty-rate measurement, once; pending holds it
	// until a bandwidth figure to plan with comes (the user's, or QEMU's
	// once the job sends).
	measured <-chan measurement
	pending  *measurement
	// undo gives the source's vGPUs back once they are marked migrating
	// out (by this run or an earlier one whose job it follows).
	undo revert.List
}

type measurement struct {
	rate float64
	err  error
}

// replan raises the limit to what the measured dirty rate says is needed
// (never lowers it: the policy may have raised it already), with the
// user's bandwidth or else QEMU's figure of what the job sends (0: none
// yet, and the plan waits for it). A guest that dirties faster than the
// link, with neither a throttle nor a pause allowed, cannot converge: the
// run aborts at once, before the first pass ends.
func (r *run) replan(m measurement, bandwidth float64, abort func(error)) {
	if m.err != nil {
		r.say(PhaseMeasure, "cannot measure the dirty rate (%v); going by the job's own figures", m.err)
		return
	}
	r.res.DirtyRate = m.rate
	if r.o.Limits.Bandwidth > 0 {
		bandwidth = r.o.Limits.Bandwidth
	}
	if bandwidth <= 0 {
		if r.pending == nil {
			r.say(PhaseMeasure, "the guest dirties %s; the downtime limit follows once the job sends", rate(m.rate))
		}
		r.pending = &m
		return
	}
	r.pending = nil
	start, why, err := Plan(r.o.Limits, m.rate, bandwidth)
	if err != nil {
		if errors.Is(err, ErrCannotConverge) {
			abort(err)
			return
		}
		r.say(PhaseMeasure, "the guest dirties %s; downtime limit stays %s (%v)", rate(m.rate), r.limit.Round(time.Millisecond), err)
		return
	}
	if start <= r.limit {
		r.say(PhaseMeasure, "the guest dirties %s (%s); downtime limit stays %s", rate(m.rate), why, r.limit.Round(time.Millisecond))
		return
	}
	late, err := r.setDowntime(start)
	if err != nil {
		r.say(PhaseMeasure, "the guest dirties %s; raising the downtime limit to %s failed: %v", rate(m.rate), start, err)
		return
	}
	r.res.Start, r.res.StartWhy = start, why
	if late != nil {
		r.say(PhaseMeasure, "the guest dirties %s; downtime limit %s (%s) once libvirt answers (%v)", rate(m.rate), start.Round(time.Millisecond), why, late)
		return
	}
	r.say(PhaseMeasure, "the guest dirties %s; downtime limit %s (%s)", rate(m.rate), start.Round(time.Millisecond), why)
}

// setDowntime asks for the downtime limit d. A change libvirt has not
// answered yet (late: ErrNoAnswer) counts as made: the Source applies its
// changes in the order asked, and libvirt applies this one when it
// answers. Going by the old limit instead would ask again, and decide
// from a limit QEMU is about to leave.
func (r *run) setDowntime(d time.Duration) (late, err error) {
	if err := r.src.SetDowntime(d); errors.Is(err, ErrNoAnswer) {
		late = err
	} else if err != nil {
		return nil, err
	}
	r.limit = d
	return late, nil
}

func (r *run) emit(e Event) {
	if r.o.Report == nil {
		return
	}
	e.Time = r.o.Now()
	r.o.Report(e)
}

func (r *run) say(phase, format string, args ...any) {
	r.emit(Event{Phase: phase, Message: fmt.Sprintf(format, args...)})
}

func defaults(o Options) Options {
	if o.Poll <= 0 {
		o.Poll = 500 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Blind <= 0 {
		o.Blind = 30 * time.Second
	}
	return o
}

// Run migrates the domain: it settles an interrupted earlier run first
// (Resolve), marks the vGPUs migrating out, plans the downtime (again once
// the dirty rate measured during the first pass arrives), runs libvirt's
// job under the convergence policy and
// finishes on both ends. A failure at any step after the mark rolls back:
// the VM keeps running on the source with its vGPUs attached. Errors wrap
// ErrAborted or ErrFailed (rolled back), ErrCannotConverge (refused before
// anything moved) or ErrUndo (a rollback failed too).
func Run(ctx context.Context, src Source, dst Dest, led Ledger, o Options) (Result, error) {
	r := &run{src: src, dst: dst, led: led, o: defaults(o)}
	r.t0 = r.o.Now()
	if done, err := r.resolve(ctx); err != nil || done {
		return r.res, err
	}
	var early *measurement
	if r.o.Limits.MaxDowntime > 0 && r.o.Limits.Bandwidth > 0 {
		// The device floor needs no measurement: refuse before the mark.
		if _, _, err := Plan(r.o.Limits, 0, r.o.Limits.Bandwidth); err != nil {
			return r.res, err
		}
		// With neither a throttle nor a pause allowed, a guest that
		// dirties faster than the given link can only be refused: measure
		// first, so that the refusal comes before anything moves (the
		// link's rate is known only from the job otherwise).
		if early = r.measureFirst(ctx); early != nil && early.err != nil {
			r.say(PhaseMeasure, "cannot measure the dirty rate before the start (%v); measuring during the first pass", early.err)
			early = nil
		}
		if early != nil {
			if _, _, err := Plan(r.o.Limits, early.rate, r.o.Limits.Bandwidth); errors.Is(err, ErrCannotConverge) {
				r.res.DirtyRate = early.rate
				return r.res, err
			}
		}
	}
	if err := led.Begin(ctx); err != nil {
		return r.res, fmt.Errorf("mark the vGPUs migrating out: %w", err)
	}
	r.giveBackOnUndo(ctx)
	r.say(PhaseReserve, "the source's vGPUs are marked migrating out")
	// Start at the limit a guest of unknown dirty rate needs, and measure
	// while the first pass runs: an idle guest is done before a measurement
	// would be, and the first pass's end is when the limit first counts.
	start, why, err := Plan(r.o.Limits, 0, r.o.Limits.Bandwidth)
	if err != nil {
		return r.res, r.rollback(err)
	}
	r.res.Start, r.res.StartWhy = start, why
	if err := src.SetDowntime(start); err != nil {
		return r.res, r.rollback(fmt.Errorf("set the downtime limit to %s: %w", start, err))
	}
	r.limit = start
	if r.o.Limits.Throttle {
		if err := src.Throttle(IdleThrottle); err != nil {
			return r.res, r.rollback(fmt.Errorf("set the throttle ceiling to %d%%: %w", IdleThrottle, err))
		}
		r.ceiling = IdleThrottle
	}
	when := "measuring the dirty rate during the first pass"
	if early != nil {
		when = "the dirty rate measured before the start follows"
	}
	r.say(PhaseMigrate, "downtime limit %s (%s, cap %s); %s", start.Round(time.Millisecond), why, r.o.Limits.capText(), when)
	if early != nil {
		ch := make(chan measurement, 1)
		ch <- *early
		r.measured = ch
	} else if r.o.Measure > 0 {
		ch := make(chan measurement, 1)
		mctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			d, err := src.DirtyRate(mctx, r.o.Measure)
			ch <- measurement{d, err}
		}()
		r.measured = ch
	}
	return r.res, r.watch(ctx, true)
}

// measureFirst measures the dirty rate before the run marks anything,
// where only a refusal could follow from it (nil: not measured).
func (r *run) measureFirst(ctx context.Context) *measurement {
	if r.o.Measure <= 0 || r.o.Limits.Throttle || r.o.Limits.AllowPause {
		return nil
	}
	r.say(PhaseMeasure, "measuring the dirty rate before anything moves (--no-throttle, no pause allowed)")
	d, err := r.src.DirtyRate(ctx, r.o.Measure)
	return &measurement{d, err}
}

// Resolve settles what an interrupted run left: the vGPUs marked migrating
// out. A job still running is watched to its end; then the domain running
// on the destination means the earlier run succeeded (the source is
// freed and the destination finished), running on the source that it did
// not (the vGPUs are attached again). done is true when the earlier run
// had moved the domain.
func Resolve(ctx context.Context, src Source, dst Dest, led Ledger, o Options) (res Result, done bool, err error) {
	r := &run{src: src, dst: dst, led: led, o: defaults(o)}
	r.t0 = r.o.Now()
	done, err = r.resolve(ctx)
	return r.res, done, err
}

func (r *run) resolve(ctx context.Context) (bool, error) {
	migrating, err := r.led.Migrating(ctx)
	if err != nil {
		return false, err
	}
	// libvirt goes on with a peer-to-peer job whose client died: follow
	// it, whether or not the domain has vGPUs to settle.
	active, ended, err := r.jobState(ctx)
	if err != nil {
		return false, err
	}
	if active {
		r.say(PhaseResolve, "a migration job of this domain already runs on the source (an earlier run was interrupted): watching it to the end")
		r.giveBackOnUndo(ctx)
		return true, r.watch(ctx, false)
	}
	if !migrating && !ended {
		return false, nil
	}
	if migrating {
		r.say(PhaseResolve, "an earlier migration of this domain was interrupted; settling it")
	}
	onDst, err := r.dst.Running()
	if err != nil {
		return false, fmt.Errorf("%w: cannot tell where the domain runs: %w", ErrUndo, err)
	}
	onSrc, err := r.src.Running()
	if err != nil {
		return false, fmt.Errorf("%w: cannot tell where the domain runs: %w", ErrUndo, err)
	}
	switch {
	case onDst && !onSrc:
		r.say(PhaseResolve, "it had finished: the domain runs on the destination")
		return true, r.finish(ctx, "resolved")
	case onSrc && !onDst:
		if !migrating {
			r.say(PhaseResolve, "it ended without moving the domain, which runs on the source: migrating it afresh")
			return false, nil
		}
		if err := r.led.Rollback(ctx); err != nil {
			return false, fmt.Errorf("%w: give the source's vGPUs back to the domain: %w", ErrUndo, err)
		}
		r.say(PhaseResolve, "it had not finished: the domain runs on the source with its vGPUs attached again")
		return false, nil
	}
	return false, fmt.Errorf("%w: the domain runs on %s; settle it by hand (vgpuctl release on the host it left)",
		ErrUndo, map[bool]string{true: "both hosts", false: "neither host"}[onSrc])
}

// jobState tells whether a migration job of the domain runs. One that has
// ended but that libvirt still holds (ErrEnding: the killed run had aborted
// it, say, and libvirt is tearing down the incoming domain) is waited out,
// bounded by endWait, so that no second job is started while libvirt would
// refuse it; ended says one was.
func (r *run) jobState(ctx context.Context) (active, ended bool, err error) {
	var since time.Time
	for n := 0; ; {
		_, active, err = r.src.Stats()
		switch {
		case errors.Is(err, ErrNoAnswer):
			if n++; n >= noAnswerTries {
				return false, ended, fmt.Errorf("cannot tell whether a migration job of this domain runs: %w", err)
			}
			continue
		case !errors.Is(err, ErrEnding):
			return err == nil && active, ended, nil
		}
		if !ended {
			ended, since = true, r.o.Now()
			r.say(PhaseResolve, "an earlier migration job of this domain is ending (%v); waiting until libvirt lets go of it", err)
		}
		if waited := r.o.Now().Sub(since); waited > endWait {
			return false, ended, fmt.Errorf("%w: libvirt still holds the ended migration job of this domain after %s; nothing was started (run the same vgpuctl migrate again once virsh domjobinfo shows no job)",
				ErrUndo, waited.Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return false, ended, fmt.Errorf("wait for the ended migration job of this domain: %w", context.Cause(ctx))
		case <-time.After(r.o.Poll):
		}
	}
}

// noAnswerTries bounds how often resolve asks a busy hypervisor whether a
// job runs before it gives up (each Stats call waits a little).
const noAnswerTries = 30

// endWait bounds how long a run waits for libvirt to let go of an ended
// job: it tears down the incoming domain on the destination (seconds), or
// first finds a lost destination lost (its keepalive: about 30 s).
const endWait = 2 * time.Minute

// watch runs (start) or follows libvirt's job to its end under the policy.
func (r *run) watch(ctx context.Context, start bool) error {
	jobCtx, cancelJob := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJob()
	ended := make(chan error, 1)
	if start {
		go func() { ended <- r.src.Migrate(jobCtx) }()
	}
	tick := time.NewTicker(r.o.Poll)
	defer tick.Stop()
	var deadline <-chan time.Time
	if r.o.Timeout > 0 {
		tm := time.NewTimer(r.o.Timeout)
		defer tm.Stop()
		deadline = tm.C
	}
	interrupted := ctx.Done()
	lastReading := r.o.Now()
	var endingSince time.Time
	var aborted error
	abort := func(why error) {
		if aborted != nil {
			return
		}
		aborted = why
		r.say(PhaseMigrate, "aborting: %v", why)
		if err := r.src.Abort(); err != nil {
			r.say(PhaseMigrate, "abort: %v", err)
		}
	}
	for {
		var jobErr error
		select {
		case jobErr = <-ended:
		case <-interrupted:
			interrupted = nil
			abort(fmt.Errorf("interrupted: %w", context.Cause(ctx)))
			continue
		case <-deadline:
			abort(fmt.Errorf("the timeout %s passed", r.o.Timeout))
			continue
		case m := <-r.measured:
			r.measured = nil
			if aborted == nil {
				r.replan(m, sentRate(r.samp), abort)
			}
			continue
		case <-tick.C:
			s, active, err := r.src.Stats()
			if errors.Is(err, ErrNoAnswer) {
				if blind := r.o.Now().Sub(lastReading); blind > r.o.Blind {
					abort(fmt.Errorf("no reading of the job for %s (%w): the downtime cap cannot be held blind", blind.Round(time.Second), err))
				}
				continue
			}
			lastReading = r.o.Now()
			if errors.Is(err, ErrEnding) {
				// Over, but libvirt still holds it: a job we started ends
				// when Migrate returns; one we follow, when libvirt lets go
				// of it (a next run would be refused before).
				if endingSince.IsZero() {
					endingSince = lastReading
				}
				if !start && lastReading.Sub(endingSince) > endWait {
					return fmt.Errorf("%w: the earlier job ended, but libvirt still holds it after %s (run the same vgpuctl migrate again once virsh domjobinfo shows no job)",
						ErrUndo, endWait)
				}
				continue
			}
			if err != nil {
				// Following a job we did not start, a source that undefined
				// the domain as it left cannot read the job any more: where
				// the domain runs says it is over.
				if !start {
					onSrc, serr := r.src.Running()
					onDst, derr := r.dst.Running()
					if serr == nil && derr == nil && !onSrc && onDst {
						return r.finish(ctx, "resolved")
					}
				}
				continue // the job may just have ended; the next tick or its end says
			}
			if !active {
				if start {
					continue
				}
				// Following a job we did not start: its end is when it stops.
				// The source says how: an aborted incoming domain may linger
				// on the destination a moment, a finished one is never left
				// running on the source.
				onSrc, serr := r.src.Running()
				onDst, derr := r.dst.Running()
				switch {
				case serr != nil || derr != nil:
					continue
				case onSrc:
					jobErr = errors.New("the earlier job ended without moving the domain")
				case onDst:
					return r.finish(ctx, "resolved")
				default:
					return fmt.Errorf("%w: the earlier job ended and the domain runs on neither host; settle it by hand (vgpuctl release on the host it left)", ErrUndo)
				}
			} else {
				r.sample(s, abort)
				continue
			}
		}
		if jobErr == nil {
			// Said apart from the result: what follows (the destination's
			// definition, the ledger) is vgpuctl's time, not the job's.
			r.say(PhaseMigrate, "libvirt's job completed after %s; finishing on the destination", r.o.Now().Sub(r.t0).Round(time.Millisecond))
			return r.finish(ctx, "migrated")
		}
		kind := ErrFailed
		if aborted != nil {
			kind, jobErr = ErrAborted, fmt.Errorf("%w (%w)", aborted, jobErr)
		}
		if r.ceiling > 0 {
			// The guest stays here: QEMU's own throttle settings back, for
			// whatever migrates it next.
			if err := r.src.Throttle(0); err != nil {
				r.say(PhaseRollback, "give QEMU its own throttle settings back: %v", err)
			}
		}
		r.settleDest()
		return r.rollback(fmt.Errorf("%w: %w", kind, jobErr))
	}
}

// sentRate is what the job sends, bytes/s, for a plan: the mean of
// QEMU's last readings (each is for 100 ms: the first ones, as the
// stream starts, were seen at a sixth of the link's rate), once there
// are two; 0 before.
func sentRate(ss []Sample) float64 {
	var sum float64
	n := 0
	for i := len(ss) - 1; i >= 0 && n < 4; i-- {
		if ss[i].Bandwidth > 0 {
			sum, n = sum+ss[i].Bandwidth, n+1
		}
	}
	if n < 2 {
		return 0
	}
	return sum / float64(n)
}

// sample feeds one job reading to the progress and the policy.
func (r *run) sample(s Sample, abort func(error)) {
	if r.pending != nil {
		if bw := sentRate(append(r.samp, s)); bw > 0 {
			r.replan(*r.pending, bw, abort)
		}
	}
	s.Downtime, s.ThrottleCeiling = r.limit, r.ceiling
	if r.pending == nil {
		s.Measured = r.res.DirtyRate
	}
	r.res.Throttle = max(r.res.Throttle, s.Throttle)
	r.samp = append(r.samp, s)
	e := Event{Phase: PhaseMigrate, Sample: &s}
	if s.Bandwidth > s.DirtyRate && s.Bandwidth > 0 {
		e.ETA = seconds(float64(s.Remaining) / (s.Bandwidth - s.DirtyRate))
	}
	r.emit(e)
	d := Decide(r.o.Limits, r.samp)
	if d.Action == Continue {
		return
	}
	r.res.Decisions = append(r.res.Decisions, d.Action.String()+": "+d.Reason)
	r.emit(Event{Phase: PhaseMigrate, Decision: d.Action.String(), Message: d.Reason})
	var err error
	switch d.Action {
	case SetDowntime:
		var late error
		if late, err = r.setDowntime(d.Downtime); late != nil {
			r.say(PhaseMigrate, "%s: %v", d.Action, late)
		}
	case Throttle:
		if err = r.src.Throttle(d.Throttle); err == nil {
			r.ceiling = d.Throttle
		}
	case Pause:
		err = r.src.Pause()
	case Abort:
		abort(fmt.Errorf("%w: %s", ErrCannotConverge, d.Reason))
	}
	if err != nil {
		r.say(PhaseMigrate, "%s: %v", d.Action, err)
	}
}

// finish completes a run whose domain now runs on the destination.
func (r *run) finish(ctx context.Context, outcome string) error {
	// The domain moved: a Ctrl-C now must not leave the handover half
	// done, and its vGPUs are not the source's to give back.
	ctx = context.WithoutCancel(ctx)
	r.undo.Success()
	c, err := r.dst.Finish(ctx)
	if err != nil {
		return fmt.Errorf("%w: the domain runs on the destination, but its definition there was not finished: %w (run the same vgpuctl migrate again)", ErrUndo, err)
	}
	if err := r.led.Commit(ctx); err != nil {
		return fmt.Errorf("%w: the domain runs on the destination, but the source's vGPUs were not freed: %w (run the same vgpuctl migrate again)", ErrUndo, err)
	}
	r.res.Outcome, r.res.Total = outcome, r.o.Now().Sub(r.t0)
	r.res.Downtime, r.res.RAMBytes, r.res.DeviceBytes, r.res.Iterations = c.Downtime, c.RAMBytes, c.DeviceBytes, c.Iterations
	if n := len(r.samp); n > 0 {
		last := r.samp[n-1]
		if !c.DeviceSet {
			r.res.DeviceBytes = last.DeviceBytes
		}
		if !c.IterateSet {
			r.res.Iterations = last.Iteration
		}
	}
	res := r.res
	r.emit(Event{Phase: PhaseDone, Message: "the domain runs on the destination; the source's vGPUs are free", Result: &res})
	return nil
}

// settleDest waits, bounded, while the destination's libvirt tears down
// the incoming domain of a failed job, so that "the VM runs on the source"
// is all true when said and a second run does not meet that domain.
func (r *run) settleDest() {
	for range int(settleWait/r.o.Poll) + 1 {
		if on, err := r.dst.Running(); err != nil || !on {
			return
		}
		time.Sleep(r.o.Poll)
	}
	r.say(PhaseRollback, "the destination still shows the incoming domain after %s; its libvirt removes it", settleWait)
}

// settleWait bounds settleDest.
const settleWait = 10 * time.Second

// giveBackOnUndo adds to the run's undo giving the source's vGPUs back
// to the domain; the caller's context may be what failed, so the undo
// runs without its cancel.
func (r *run) giveBackOnUndo(ctx context.Context) {
	r.undo.Add("giving the source's vGPUs back", func() error {
		return r.led.Rollback(context.WithoutCancel(ctx))
	})
}

// rollback runs the run's undo (the source's vGPUs back to the domain)
// after err.
func (r *run) rollback(err error) error {
	r.res.Outcome, r.res.Total = "failed", r.o.Now().Sub(r.t0)
	if errors.Is(err, ErrAborted) || errors.Is(err, ErrCannotConverge) {
		r.res.Outcome = "aborted"
	}
	if uerr := r.undo.Undo(); uerr != nil {
		return fmt.Errorf("%w: %w; and %w", ErrUndo, err, uerr)
	}
	if errors.Is(err, ErrCannotConverge) && !errors.Is(err, ErrAborted) {
		err = fmt.Errorf("%w: %w", ErrAborted, err)
	}
	res := r.res
	r.emit(Event{Phase: PhaseRollback, Message: err.Error(), Result: &res})
	return err
}
