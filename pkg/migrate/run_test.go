package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeJob is libvirt's migration job on a simulated precopy: every Stats
// call is one pass; the job ends when the remainder and the device state
// fit in the downtime limit, or when aborted.
type fakeJob struct {
	mu sync.Mutex
	p  precopy
	// dev is the devices' stop-copy bytes.
	dev float64

	rem   uint64
	pass  uint64
	limit time.Duration
	// ceilings are the throttle ceilings the run set, in order; QEMU
	// applies the last at once here.
	ceilings []int
	paused   bool
	started  bool
	ended    chan error
	aborted  bool
	onSrc    bool
	onDst    bool
	downtime time.Duration

	// Faults.
	failMigrate error // libvirt refuses (the destination's hook, say)
	failSet     error
	failRate    error
	failAbort   bool
	hang        bool // the job never ends by itself
	// undefine: the source loses the domain as the job ends (libvirt's
	// --undefine-source): its job cannot be read any more.
	undefine bool
	noAnswer bool // job readings never come back (a busy QEMU monitor)
	// lateSet: every downtime change after the first (the start, set
	// before the job) answers ErrNoAnswer and lands lateSet job readings
	// later, in the order asked, as a busy libvirt applies it.
	lateSet int
	late    []lateLimit
	// sets are the downtime limits asked, in order.
	sets []time.Duration
	// hold: job readings do not come back until it is closed.
	hold <-chan struct{}
	// linger: after an abort the incoming domain stays active on the
	// destination for this many questions (libvirt tearing it down).
	linger int
	// endFor: after an abort libvirt holds the job this many job readings
	// more (its Finish on the destination, its Confirm); held counts them
	// down. While held, readings answer ErrEnding and a new job is refused
	// as libvirt refuses it; refused counts those.
	endFor, held, refused int
}

func newJob(p precopy) *fakeJob {
	return &fakeJob{p: p, rem: p.ram, ended: make(chan error, 1), onSrc: true}
}

func (j *fakeJob) DirtyRate(context.Context, time.Duration) (float64, error) {
	if j.failRate != nil {
		return 0, j.failRate
	}
	return min(j.p.dirty, float64(j.p.wss)), nil
}

// lateLimit is a downtime limit that lands once the job's reading count
// reaches at.
type lateLimit struct {
	d  time.Duration
	at uint64
}

func (j *fakeJob) SetDowntime(d time.Duration) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failSet != nil {
		return j.failSet
	}
	j.sets = append(j.sets, d)
	if j.lateSet > 0 && len(j.sets) > 1 {
		j.late = append(j.late, lateLimit{d, j.pass + uint64(j.lateSet)})
		return fmt.Errorf("set the downtime limit: %w within 10s", ErrNoAnswer)
	}
	j.limit = d
	return nil
}

func (j *fakeJob) Throttle(pct int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ceilings = append(j.ceilings, pct)
	return nil
}

func (j *fakeJob) throttle() int {
	if len(j.ceilings) == 0 {
		return 0
	}
	return j.ceilings[len(j.ceilings)-1]
}

func (j *fakeJob) Migrate(context.Context) error {
	j.mu.Lock()
	if j.held > 0 {
		j.refused++
		j.mu.Unlock()
		return errors.New("Requested operation is not valid: another migration job is already running for domain 'vm'")
	}
	j.started = true
	fail := j.failMigrate
	j.mu.Unlock()
	if fail != nil {
		j.mu.Lock()
		j.started = false
		j.mu.Unlock()
		return fail
	}
	return <-j.ended
}

func (j *fakeJob) Stats() (Sample, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.held > 0 {
		j.held--
		return Sample{}, false, fmt.Errorf("cancelled: %w", ErrEnding)
	}
	if !j.started && j.undefine && j.onDst {
		return Sample{}, false, errors.New("read the migration job: domain not found")
	}
	if !j.started {
		return Sample{}, false, nil
	}
	if j.noAnswer {
		return Sample{}, false, ErrNoAnswer
	}
	select {
	case <-j.hold:
	default:
		if j.hold != nil {
			return Sample{}, false, ErrNoAnswer
		}
	}
	j.pass++
	for len(j.late) > 0 && j.late[0].at <= j.pass {
		j.limit, j.late = j.late[0].d, j.late[1:]
	}
	// As libvirt's job figures: no downtime limit in them.
	dirty := j.p.dirty
	if j.p.slowed {
		dirty *= 1 - float64(j.throttle())/100
	}
	s := Sample{Iteration: j.pass, Total: j.p.ram, Remaining: j.rem, DirtyRate: dirty, Bandwidth: j.p.bw,
		Paused: j.paused, DeviceBytes: 60, Throttle: j.throttle()}
	if need := seconds((float64(j.rem) + j.dev) / j.p.bw); need <= j.limit && !j.hang {
		j.downtime, j.started, j.onSrc, j.onDst = need, false, false, true
		j.ended <- nil
		return s, true, nil
	}
	took := float64(j.rem) / j.p.bw
	j.rem = min(j.p.wss, uint64(dirty*took))
	if j.paused {
		j.rem = 0
	}
	return s, true, nil
}

func (j *fakeJob) Pause() error {
	j.mu.Lock()
	j.paused = true
	j.mu.Unlock()
	return nil
}

func (j *fakeJob) Abort() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failAbort || !j.started {
		return errors.New("no job")
	}
	j.aborted, j.started = true, false
	j.onDst = j.linger > 0
	j.held = j.endFor
	j.ended <- errors.New("operation aborted: migration job: canceled by client")
	return nil
}

func (j *fakeJob) Running() (bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.onSrc, nil
}

// fakeDest is the destination.
type fakeDest struct {
	j          *fakeJob
	finished   int
	failFinish error
}

func (d *fakeDest) Running() (bool, error) {
	d.j.mu.Lock()
	defer d.j.mu.Unlock()
	on := d.j.onDst
	if d.j.aborted && d.j.linger > 0 {
		if d.j.linger--; d.j.linger == 0 {
			d.j.onDst = false
		}
	}
	return on, nil
}

func (d *fakeDest) Finish(context.Context) (Completed, error) {
	if d.failFinish != nil {
		return Completed{}, d.failFinish
	}
	d.finished++
	return Completed{Downtime: d.j.downtime, RAMBytes: d.j.p.ram, Iterations: d.j.pass, IterateSet: true}, nil
}

// fakeLedger is the source vgpud's ledger: "attached", "migrating" or "free".
type fakeLedger struct {
	state                              string
	failBegin, failCommit, failRollbak error
	commits                            int
}

func (l *fakeLedger) Begin(context.Context) error {
	if l.failBegin != nil {
		return l.failBegin
	}
	l.state = "migrating"
	return nil
}

func (l *fakeLedger) Commit(context.Context) error {
	if l.failCommit != nil {
		return l.failCommit
	}
	if l.state == "free" {
		panic("double free")
	}
	l.state = "free"
	l.commits++
	return nil
}

func (l *fakeLedger) Rollback(context.Context) error {
	if l.failRollbak != nil {
		return l.failRollbak
	}
	l.state = "attached"
	return nil
}

func (l *fakeLedger) Migrating(context.Context) (bool, error) { return l.state == "migrating", nil }

func opts(max time.Duration) Options {
	return Options{Limits: Limits{MaxDowntime: max}, Poll: time.Millisecond, Measure: time.Millisecond}
}

const bw = 100 * mb

var (
	idle = precopy{ram: 512 * mb, dirty: 0, bw: bw}
	hot  = precopy{ram: 512 * mb, wss: 200 * mb, dirty: 300 * mb, bw: bw}
)

func TestRunMigrates(t *testing.T) {
	j := newJob(idle)
	d := &fakeDest{j: j}
	l := &fakeLedger{state: "attached"}
	var events []Event
	o := opts(300 * time.Millisecond)
	// The job waits for the measurement's word: an idle guest is done in
	// two readings, which could otherwise come first.
	measured := make(chan struct{})
	j.hold = measured
	o.Report = func(e Event) {
		events = append(events, e)
		if e.Phase == PhaseMeasure {
			select {
			case <-measured:
			default:
				close(measured)
			}
		}
	}
	res, err := Run(context.Background(), j, d, l, o)
	if err != nil || res.Outcome != "migrated" || l.state != "free" || d.finished != 1 || !j.onDst {
		t.Fatalf("run = %+v, %v; ledger %s, finished %d", res, err, l.state, d.finished)
	}
	if res.Downtime > 300*time.Millisecond || res.Start != minDowntime || res.Iterations == 0 {
		t.Fatalf("result %+v", res)
	}
	phases := map[string]bool{}
	for _, e := range events {
		phases[e.Phase] = true
	}
	for _, p := range []string{PhaseReserve, PhaseMeasure, PhaseMigrate, PhaseDone} {
		if !phases[p] {
			t.Fatalf("no %s event in %+v", p, events)
		}
	}
}

// TestRunThrottles: a guest that dirties faster than the link, in
// proportion to its vCPU time, migrates within the cap once the run lets
// QEMU throttle it (the ceiling starts at 1% and rises only when the
// policy asks); without a throttle or a pause it is refused as soon as
// the measurement says so; aborted, QEMU gets its own throttle settings
// back.
func TestRunThrottles(t *testing.T) {
	beyond := precopy{ram: 512 * mb, wss: 300 * mb, dirty: 150 * mb, bw: bw, slowed: true}
	j := newJob(beyond)
	l := &fakeLedger{state: "attached"}
	o := opts(500 * time.Millisecond)
	o.Limits.Throttle = true
	res, err := Run(context.Background(), j, &fakeDest{j: j}, l, o)
	if err != nil || res.Outcome != "migrated" || res.Downtime > 500*time.Millisecond || l.state != "free" {
		t.Fatalf("run = %+v, %v", res, err)
	}
	if len(j.ceilings) < 2 || j.ceilings[0] != IdleThrottle || res.Throttle < 50 {
		t.Fatalf("throttle ceilings %v, most applied %d%%; want 1%% first, then at least 50%%", j.ceilings, res.Throttle)
	}

	j = newJob(beyond)
	l = &fakeLedger{state: "attached"}
	o = opts(500 * time.Millisecond)
	_, err = Run(context.Background(), j, &fakeDest{j: j}, l, o)
	if !errors.Is(err, ErrAborted) || !errors.Is(err, ErrCannotConverge) || !strings.Contains(err.Error(), "more than the 100.0 MiB/s the link sends") ||
		j.pass > 2 || len(j.ceilings) != 0 || l.state != "attached" || !j.onSrc {
		t.Fatalf("run without a throttle = %v after %d passes, ceilings %v, ledger %s", err, j.pass, j.ceilings, l.state)
	}

	// With the link's rate given (--bandwidth), the refusal comes before
	// anything is marked or sent: the measurement is taken first.
	j = newJob(beyond)
	l = &fakeLedger{state: "attached"}
	o = opts(500 * time.Millisecond)
	o.Limits.Bandwidth = bw
	var said []string
	o.Report = func(e Event) { said = append(said, e.Message) }
	res, err = Run(context.Background(), j, &fakeDest{j: j}, l, o)
	if !errors.Is(err, ErrCannotConverge) || errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "more than the 100.0 MiB/s the link sends") ||
		j.started || l.state != "attached" || res.DirtyRate != beyond.dirty || !strings.Contains(strings.Join(said, "\n"), "before anything moves") {
		t.Fatalf("run without a throttle, bandwidth given = %+v, %v; started %v, ledger %s, said %q", res, err, j.started, l.state, said)
	}
	// A measurement that fails before the start is taken again during the
	// first pass, as without the link's rate.
	j = newJob(idle)
	j.failRate = errors.New("calc-dirty-rate: not supported")
	l = &fakeLedger{state: "attached"}
	o = opts(time.Second)
	o.Limits.Bandwidth = bw
	said = nil
	o.Report = func(e Event) { said = append(said, e.Message) }
	all := func() string { return strings.Join(said, "\n") }
	if res, err = Run(context.Background(), j, &fakeDest{j: j}, l, o); err != nil || res.Outcome != "migrated" ||
		!strings.Contains(all(), "measuring during the first pass") || strings.Contains(all(), "measured before the start follows") {
		t.Fatalf("run whose early measurement fails = %+v, %v; said %q", res, err, said)
	}
	// A guest the link keeps up with goes on, with that measurement.
	j = newJob(hot)
	j.p.dirty = 50 * mb
	l = &fakeLedger{state: "attached"}
	o = opts(time.Second)
	o.Limits.Bandwidth = bw
	if res, err = Run(context.Background(), j, &fakeDest{j: j}, l, o); err != nil || res.Outcome != "migrated" || res.DirtyRate != 50*mb || l.state != "free" {
		t.Fatalf("run without a throttle of a guest below the link = %+v, %v, ledger %s", res, err, l.state)
	}

	j = newJob(beyond)
	j.hang = true
	l = &fakeLedger{state: "attached"}
	o = opts(500 * time.Millisecond)
	o.Limits.Throttle, o.Timeout = true, 50*time.Millisecond
	if _, err = Run(context.Background(), j, &fakeDest{j: j}, l, o); !errors.Is(err, ErrAborted) || j.throttle() != 0 {
		t.Fatalf("aborted run = %v, ceilings %v; want QEMU's settings back (0) last", err, j.ceilings)
	}
}

// TestRunFaults: every fault leaves the VM on the source with its vGPUs
// attached (or untouched when nothing was marked), and says which kind.
func TestRunFaults(t *testing.T) {
	for _, c := range []struct {
		name   string
		p      precopy
		max    time.Duration
		setup  func(*fakeJob, *fakeDest, *fakeLedger, *Options)
		ctx    func() (context.Context, context.CancelFunc)
		want   error
		ledger string
		msg    string
	}{
		{name: "source vgpud refuses the mark", p: idle, max: time.Second,
			setup: func(_ *fakeJob, _ *fakeDest, l *fakeLedger, _ *Options) {
				l.failBegin = errors.New("vgpud is not running")
			},
			ledger: "attached", msg: "mark the vGPUs migrating out: vgpud is not running"},
		{name: "device floor above the cap", p: idle, max: 100 * time.Millisecond,
			setup: func(_ *fakeJob, _ *fakeDest, _ *fakeLedger, o *Options) {
				o.Limits.Bandwidth = bw
				o.Limits.Devices = []Device{{ID: "v", StopCopyBytes: 50 * mb}}
			},
			want: ErrCannotConverge, ledger: "attached", msg: "above the downtime cap"},
		{name: "destination refuses (its hook)", p: idle, max: time.Second,
			setup: func(j *fakeJob, _ *fakeDest, _ *fakeLedger, _ *Options) {
				j.failMigrate = errors.New("hook script execution failed: vgpu: no free t4-4q")
			},
			want: ErrFailed, ledger: "attached", msg: "no free t4-4q"},
		{name: "setting the downtime fails", p: idle, max: time.Second,
			setup:  func(j *fakeJob, _ *fakeDest, _ *fakeLedger, _ *Options) { j.failSet = errors.New("no") },
			ledger: "attached", msg: "set the downtime limit"},
		{name: "cannot converge", p: hot, max: 300 * time.Millisecond,
			want: ErrAborted, ledger: "attached", msg: "the downtime cap 300ms"},
		{name: "timeout", p: idle, max: time.Second,
			setup: func(j *fakeJob, _ *fakeDest, _ *fakeLedger, o *Options) {
				j.hang = true
				o.Timeout = 20 * time.Millisecond
			},
			want: ErrAborted, ledger: "attached", msg: "the timeout 20ms passed"},
		{name: "interrupted (Ctrl-C)", p: idle, max: time.Second,
			setup: func(j *fakeJob, _ *fakeDest, _ *fakeLedger, _ *Options) { j.hang = true },
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 20*time.Millisecond)
			},
			want: ErrAborted, ledger: "attached", msg: "interrupted"},
		{name: "rollback fails too", p: idle, max: time.Second,
			setup: func(j *fakeJob, _ *fakeDest, l *fakeLedger, _ *Options) {
				j.failMigrate = errors.New("link down")
				l.failRollbak = errors.New("vgpud died")
			},
			want: ErrUndo, ledger: "migrating", msg: "link down; and giving the source's vGPUs back failed: vgpud died"},
		{name: "finish fails", p: idle, max: time.Second,
			setup: func(_ *fakeJob, d *fakeDest, _ *fakeLedger, _ *Options) { d.failFinish = errors.New("define failed") },
			want:  ErrUndo, ledger: "migrating", msg: "run the same vgpuctl migrate again"},
		{name: "commit fails", p: idle, max: time.Second,
			setup: func(_ *fakeJob, _ *fakeDest, l *fakeLedger, _ *Options) { l.failCommit = errors.New("vgpud died") },
			want:  ErrUndo, ledger: "migrating", msg: "source's vGPUs were not freed"},
		{name: "no dirty-rate figure: goes on", p: idle, max: time.Second,
			setup:  func(j *fakeJob, _ *fakeDest, _ *fakeLedger, _ *Options) { j.failRate = errors.New("unsupported") },
			ledger: "free"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := newJob(c.p)
			d := &fakeDest{j: j}
			l := &fakeLedger{state: "attached"}
			o := opts(c.max)
			if c.setup != nil {
				c.setup(j, d, l, &o)
			}
			ctx, cancel := context.WithCancel(context.Background())
			if c.ctx != nil {
				ctx, cancel = c.ctx()
			}
			defer cancel()
			_, err := Run(ctx, j, d, l, o)
			if c.want != nil && !errors.Is(err, c.want) || c.msg != "" && (err == nil || !strings.Contains(err.Error(), c.msg)) || c.msg == "" && err != nil {
				t.Fatalf("err = %v; want %v containing %q", err, c.want, c.msg)
			}
			if l.state != c.ledger {
				t.Fatalf("ledger %s after %v; want %s", l.state, err, c.ledger)
			}
			if c.ledger == "attached" && (!j.onSrc || j.onDst) {
				t.Fatalf("the VM left the source: src %v dst %v", j.onSrc, j.onDst)
			}
		})
	}
}

// TestResolve: a run interrupted (vgpuctl killed) is settled by the next:
// forward when the domain reached the destination, back when it did not,
// never freeing twice.
func TestResolve(t *testing.T) {
	ctx := context.Background()
	// Finished while vgpuctl was dead.
	j := newJob(idle)
	j.onSrc, j.onDst = false, true
	l := &fakeLedger{state: "migrating"}
	d := &fakeDest{j: j}
	res, err := Run(ctx, j, d, l, opts(time.Second))
	if err != nil || res.Outcome != "resolved" || l.state != "free" || l.commits != 1 || d.finished != 1 {
		t.Fatalf("resolve forward = %+v, %v, ledger %s", res, err, l.state)
	}
	// Run again: nothing to resolve, nothing freed twice... and the domain
	// is not on the source any more, which the caller checks first.
	if _, done, err := Resolve(ctx, j, d, l, opts(time.Second)); done || err != nil || l.commits != 1 {
		t.Fatalf("second resolve: done %v, %v, commits %d", done, err, l.commits)
	}
	// Failed while vgpuctl was dead: back, then a fresh migration.
	j = newJob(idle)
	l = &fakeLedger{state: "migrating"}
	d = &fakeDest{j: j}
	res, err = Run(ctx, j, d, l, opts(time.Second))
	if err != nil || res.Outcome != "migrated" || l.state != "free" || l.commits != 1 {
		t.Fatalf("resolve back then migrate = %+v, %v, ledger %s", res, err, l.state)
	}
	// Still running: followed to its end.
	j = newJob(idle)
	j.started = true
	l = &fakeLedger{state: "migrating"}
	d = &fakeDest{j: j}
	j.limit = time.Second
	res, done, err := Resolve(ctx, j, d, l, opts(time.Second))
	if err != nil || !done || l.state != "free" || res.Outcome != "resolved" {
		t.Fatalf("resolve of a running job = %+v, %v, %v, ledger %s", res, done, err, l.state)
	}
	// Still running, and the source undefines the domain as it leaves (its
	// job then cannot be read): followed to its end all the same.
	j = newJob(idle)
	j.started, j.undefine, j.limit = true, true, time.Second
	l = &fakeLedger{state: "migrating"}
	d = &fakeDest{j: j}
	res, done, err = Resolve(ctx, j, d, l, opts(time.Second))
	if err != nil || !done || l.state != "free" || res.Outcome != "resolved" || l.commits != 1 {
		t.Fatalf("resolve of a running job whose domain the source undefines = %+v, %v, %v, ledger %s", res, done, err, l.state)
	}
	// A job whose client died, for a domain without vGPUs (nothing in the
	// ledger): followed too, never started twice.
	j = newJob(idle)
	j.started, j.limit = true, time.Second
	l = &fakeLedger{state: "attached"}
	if res, done, err := Resolve(ctx, j, &fakeDest{j: j}, noLedger{l}, opts(time.Second)); err != nil || !done || res.Outcome != "resolved" || !j.onDst {
		t.Fatalf("resolve of a running job without a ledger = %+v, %v, %v", res, done, err)
	}
	// Followed, cannot converge, aborted: the incoming domain lingers on
	// the destination a moment, but the source still runs it: rolled back.
	j = newJob(hot)
	j.started, j.linger, j.hang = true, 3, true
	l = &fakeLedger{state: "migrating"}
	d = &fakeDest{j: j}
	res, done, err = Resolve(ctx, j, d, l, opts(time.Second))
	if !errors.Is(err, ErrAborted) || !done || l.state != "attached" || d.finished != 0 || res.Outcome != "aborted" || j.onDst {
		t.Fatalf("followed job aborted with the destination lingering = %+v, %v, %v, ledger %s, finished %d", res, done, err, l.state, d.finished)
	}
	// On both or neither: the admin decides.
	j = newJob(idle)
	j.onSrc = false
	l = &fakeLedger{state: "migrating"}
	if _, _, err := Resolve(ctx, j, &fakeDest{j: j}, l, opts(time.Second)); !errors.Is(err, ErrUndo) || !strings.Contains(err.Error(), "neither host") {
		t.Fatalf("resolve with the domain nowhere: %v", err)
	}
}

// TestResolveEndingJob: a job that is over but that libvirt still holds
// (the killed run had aborted it; libvirt tears the incoming domain down
// on the destination before it lets go) is waited out, never met with a
// second job, which libvirt would refuse; a followed job aborted by the
// policy is over only once libvirt lets go of it, so that the next run
// is not refused either; and the wait is bounded.
func TestResolveEndingJob(t *testing.T) {
	ctx := context.Background()
	for _, ledger := range []string{"migrating", "attached"} {
		j := newJob(idle)
		j.held = 5
		l := &fakeLedger{state: ledger}
		var said []string
		o := opts(time.Second)
		o.Report = func(e Event) { said = append(said, e.Message) }
		led := Ledger(l)
		if ledger == "attached" {
			led = noLedger{l}
		}
		res, err := Run(ctx, j, &fakeDest{j: j}, led, o)
		if err != nil || res.Outcome != "migrated" || j.refused != 0 || l.state != "free" {
			t.Fatalf("run after an ending job (ledger %s) = %+v, %v; refused %d, ledger %s", ledger, res, err, j.refused, l.state)
		}
		if all := strings.Join(said, "\n"); !strings.Contains(all, "is ending (cancelled") || !strings.Contains(all, "migrating it afresh") && ledger == "attached" {
			t.Fatalf("run after an ending job (ledger %s) said:\n%s", ledger, all)
		}
	}
	// Followed, aborted by the policy: not over until libvirt lets go.
	j := newJob(hot)
	j.started, j.hang, j.endFor = true, true, 5
	l := &fakeLedger{state: "migrating"}
	_, done, err := Resolve(ctx, j, &fakeDest{j: j}, l, opts(time.Second))
	if !errors.Is(err, ErrAborted) || !done || l.state != "attached" || j.held != 0 {
		t.Fatalf("followed job aborted = %v, done %v, ledger %s, still held for %d readings", err, done, l.state, j.held)
	}
	// libvirt never lets go: the run says so and starts nothing.
	j = newJob(idle)
	j.held = 1 << 30
	o := opts(time.Second)
	var clock time.Time
	o.Now = func() time.Time { clock = clock.Add(time.Minute); return clock }
	l = &fakeLedger{state: "migrating"}
	if _, err := Run(ctx, j, &fakeDest{j: j}, l, o); !errors.Is(err, ErrUndo) || !strings.Contains(err.Error(), "still holds") || j.refused != 0 || l.state != "migrating" {
		t.Fatalf("run while libvirt never lets go = %v; refused %d, ledger %s", err, j.refused, l.state)
	}
}

// noLedger is the ledger of a domain without vGPUs.
type noLedger struct{ *fakeLedger }

func (noLedger) Migrating(context.Context) (bool, error) { return false, nil }

// TestRunDowntimeLandsLate: libvirt may answer the raise of the downtime
// limit after the measurement only after the watch's bound (seen: over
// 10 s), and apply it then. The run goes by the limit it asked for: it is
// the result's start, the samples show it, and it is not asked again.
func TestRunDowntimeLandsLate(t *testing.T) {
	below := precopy{ram: 512 * mb, wss: 200 * mb, dirty: 50 * mb, bw: bw}
	run := func(lateSet int) (*fakeJob, Result, []Event) {
		t.Helper()
		j := newJob(below)
		j.lateSet = lateSet
		o := opts(time.Second)
		o.Limits.Bandwidth = bw
		var events []Event
		o.Report = func(e Event) { events = append(events, e) }
		l := &fakeLedger{state: "attached"}
		res, err := Run(context.Background(), j, &fakeDest{j: j}, l, o)
		if err != nil || res.Outcome != "migrated" || l.state != "free" {
			t.Fatalf("run (downtime changes %d readings late) = %+v, %v; ledger %s", lateSet, res, err, l.state)
		}
		return j, res, events
	}
	_, prompt, _ := run(0)
	if prompt.Start <= minDowntime {
		t.Fatalf("the measured guest's start %s; want a raise above %s for this test to mean anything", prompt.Start, minDowntime)
	}
	j, res, events := run(3)
	if res.Start != prompt.Start || res.StartWhy != prompt.StartWhy {
		t.Fatalf("start with the raise answered late = %s (%s); want %s (%s), as answered at once", res.Start, res.StartWhy, prompt.Start, prompt.StartWhy)
	}
	if n := slices.Index(j.sets, res.Start); n < 0 || slices.Index(j.sets[n+1:], res.Start) >= 0 {
		t.Fatalf("downtime limits asked %v; want the raise to %s asked once", j.sets, res.Start)
	}
	said := -1
	for i, e := range events {
		if strings.Contains(e.Message, "once libvirt answers") {
			said = i
		}
	}
	if said < 0 {
		t.Fatalf("no event says the raise lands once libvirt answers: %+v", events)
	}
	for _, e := range events[said:] {
		if e.Sample != nil && e.Sample.Downtime < res.Start {
			t.Fatalf("a sample after the raise shows the limit %s; want at least %s", e.Sample.Downtime, res.Start)
		}
	}
}

// A hypervisor too busy to answer job readings does not stall the watch:
// the timeout still aborts; without one, going blind for too long does.
// Either way the VM stays on the source.
func TestRunNoAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, want     string
		timeout, blind time.Duration
	}{
		{"timeout", "the timeout", 50 * time.Millisecond, time.Hour},
		{"blind", "no reading of the job", 0, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(hot)
			j.hang, j.noAnswer = true, true
			o := opts(time.Second)
			o.Timeout, o.Blind = tc.timeout, tc.blind
			l := &fakeLedger{state: "attached"}
			_, err := Run(context.Background(), j, &fakeDest{j: j}, l, o)
			if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), tc.want) || !j.aborted || l.state != "attached" {
				t.Fatalf("run with no job readings = %v; aborted %v, ledger %s", err, j.aborted, l.state)
			}
		})
	}
}

// TestSentRate: the plan's bandwidth is the mean of QEMU's last readings,
// none before two (the first, as the stream starts, reads far low).
func TestSentRate(t *testing.T) {
	ss := []Sample{{}, {Bandwidth: 1 * mb}}
	if r := sentRate(ss); r != 0 {
		t.Fatalf("one reading: %v", r)
	}
	ss = append(ss, Sample{}, Sample{Bandwidth: 7 * mb}, Sample{Bandwidth: 8 * mb}, Sample{Bandwidth: 6 * mb}, Sample{Bandwidth: 7 * mb})
	if r := sentRate(ss); r != 7*mb {
		t.Fatalf("mean of the last four: %v MiB/s", r/mb)
	}
}
