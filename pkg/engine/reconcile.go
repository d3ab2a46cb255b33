package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/internal/change"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/api/convert"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/mdevctl"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Reasons a reconcile runs, as reports and logs name them.
const (
	ReasonStart   = "start"
	ReasonSIGHUP  = "sighup"
	ReasonApply   = "apply"
	ReasonAPI     = "api"
	ReasonRelease = "release"
)

// Reconcile brings the host to the config: every GPU the config names is
// carved with its profile (never forcing: what is in use is refused and
// reported), every GPU vgpud carved for an earlier config that the config
// no longer names is uncarved unless in use, and allocated mdevs that are
// missing (after a reboot) get their identity back. One GPU's failure does
// not stop the others.
func (e *Engine) Reconcile(ctx context.Context, reason string) api.ReconcileReport {
	e.host.Lock()
	defer e.host.Unlock()
	if err := change.Begin(ctx); err != nil {
		return api.ReconcileReport{Reason: reason, Config: e.Config().Path, Started: time.Now().UTC(), GPUs: []api.GPUReport{}, Error: err.Error()}
	}
	return e.reconcileLocked(ctx, e.Config(), reason, nil)
}

// reconcileLocked reconciles the GPUs and virtual mdev parents in only (by
// address or parent name; all when nil); e.host is held.
func (e *Engine) reconcileLocked(ctx context.Context, cfg *config.Config, reason string, only map[string]bool) (rep api.ReconcileReport) {
	start := time.Now()
	rep = api.ReconcileReport{Reason: reason, Config: cfg.Path, Started: start.UTC(), GPUs: []api.GPUReport{}}
	defer func() {
		rep.Duration = time.Since(start).Round(time.Microsecond).String()
		e.finishReport(&rep, start)
	}()
	defer e.invalidate()

	if err := e.repairAutoprobe(ctx, &rep); err != nil {
		defer func() { rep.Error = joinError(rep.Error, "repair: "+err.Error()) }() // before finishReport
	}
	gpus, err := inventory.Discover(e.fs, nil)
	if err != nil {
		rep.Error = fmt.Sprintf("discover the host's GPUs: %v", err)
		return rep
	}
	// What NVML says of each GPU is learnt here (and at carves), for the
	// views that answer the API without asking it: once per GPU, again for
	// another GPU at its address or after a failure's retry time.
	for i := range gpus {
		e.carver.Enrich(&gpus[i])
	}
	as, err := cfg.Desired(gpus, e.catalog)
	if cfg == e.Config() { // GPUs come and go: targeted views take the labels from here
		e.setDesired(desiredProfiles(as, err))
	}
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	ps, err := cfg.DesiredParents(e.catalog)
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	if err := checkMdevctl(e.fs, e.mdevctlDir, cfg, as, only); err != nil {
		rep.Error = err.Error()
		return rep
	}
	records, err := e.ledger.CarvedGPUs()
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	carved := map[string]ledger.Carved{}
	for _, c := range records {
		carved[c.Target().String()] = c
	}
	wanted := map[string]bool{}
	carveOne := func(t vgpu.Target, prof string, mdevUUIDs []string) {
		k := t.String()
		wanted[k] = true
		if only != nil && !only[k] {
			return
		}
		rec, ok := carved[k]
		r := e.carveFor(ctx, t, prof, mdevUUIDs, ok && rec.Profile == prof)
		if r.Error == "" && len(r.Refused) == 0 {
			var err error
			if r.Restored, err = e.restoreIdentities(ctx, t, prof); err != nil {
				r.Error = err.Error()
			}
		}
		rep.GPUs = append(rep.GPUs, r)
	}
	for _, a := range as {
		carveOne(vgpu.GPU(a.GPU), a.Profile, a.MdevUUIDs)
	}
	for _, a := range ps {
		carveOne(vgpu.Parent(a.Parent), a.Profile, a.MdevUUIDs)
	}
	for _, c := range records {
		t := c.Target()
		if k := t.String(); wanted[k] || only != nil && !only[k] {
			continue
		}
		rep.GPUs = append(rep.GPUs, e.uncarveGone(ctx, t))
	}
	return rep
}

// changingError: reconcile leaves a GPU a manual change is working on;
// the next reconcile looks at it again.
func changingError() string {
	return ErrChanging.Error() + " (vgpuctl carve or uncarve); the next reconcile looks at it again"
}

// finishReport counts, logs and records a report.
func (e *Engine) finishReport(rep *api.ReconcileReport, start time.Time) {
	sortReports(rep.GPUs)
	for _, r := range rep.GPUs {
		switch {
		case r.Error != "":
			rep.Failed++
			e.metrics.GPUChange("failed")
			e.log.Error("reconcile: GPU failed", "gpu", r.GPU, "profile", r.Profile, "action", r.Action, "err", r.Error)
		case len(r.Refused) > 0:
			rep.Refused++
			e.metrics.GPUChange("refused")
			e.log.Warn("reconcile: GPU refused, vGPUs in use", "gpu", r.GPU, "profile", r.Profile, "action", r.Action,
				"inUse", blockers(r.Refused))
		case r.Changed():
			rep.Changed++
			e.metrics.GPUChange("changed")
			e.log.Info("reconcile: GPU changed", "gpu", r.GPU, "profile", r.Profile, "action", r.Action,
				"ops", len(r.Ops), "restored", r.Restored)
		default:
			e.log.Debug("reconcile: GPU already as wanted", "gpu", r.GPU, "profile", r.Profile)
		}
	}
	rep.Drift = rep.Failed + rep.Refused
	if rep.Error != "" {
		rep.Drift++
		e.log.Error("reconcile: config not applied", "reason", rep.Reason, "config", rep.Config, "err", rep.Error)
	}
	var err error
	if !rep.OK() {
		err = errors.New("reconcile incomplete")
	}
	observe(e.metrics, opReconcile, start, err)
	e.metrics.Reconciled(rep.Drift, time.Now())
	e.lastMu.Lock()
	e.last = ReconcileSummary{At: time.Now(), Drift: rep.Drift}
	e.lastMu.Unlock()
	level := slog.LevelInfo
	if !rep.OK() {
		level = slog.LevelWarn
	}
	e.log.Log(context.Background(), level, "reconcile done", "reason", rep.Reason, "gpus", len(rep.GPUs),
		"changed", rep.Changed, "refused", rep.Refused, "failed", rep.Failed, "took", time.Since(start).Round(time.Microsecond))
}

func blockers(bs []api.Blocker) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.VGPU + " (" + b.Holder + ")"
	}
	return out
}

// carveFor carves t (a GPU, or a virtual mdev parent such as mbochs) for
// the config, with the mdev UUIDs it pins, inside a ledger intent; e.host
// is held. It plans first, so a target already as wanted costs no ledger
// write, refuses when a vGPU in use would go, and records t carved. A
// parent's report names it in GPU.
func (e *Engine) carveFor(ctx context.Context, t vgpu.Target, prof string, pins []string, recorded bool) api.GPUReport {
	name := t.String()
	r := api.GPUReport{GPU: name, Profile: prof, Action: "carve"}
	if e.Changing(name) {
		r.Error = changingError()
		return r
	}
	errContext := ""
	if t.IsParent() {
		errContext = fmt.Sprintf("carve %s with %s: ", t.Describe(), prof)
	}
	run := func(opt carve.Options) (carve.Result, error) {
		opt.GIMSiblings = true // the config gives every GIM GPU one profile (config.ErrGIMMixed)
		opt.MdevUUIDs = pins
		return e.carver.Carve(ctx, t, prof, opt)
	}
	start := time.Now()
	dry, err := run(carve.Options{DryRun: true})
	if err == nil && len(dry.Plan.Blocked) > 0 {
		r.Refused = convert.Blockers(dry.Plan.Blocked)
		return r
	}
	if err == nil && !dry.Plan.Empty() {
		var res carve.Result
		err = e.inIntent(ledger.IntentCarve, t, prof, nil, func() error {
			res, err = run(carve.Options{})
			return err
		})
		var inUse *carve.InUseError
		if errors.As(err, &inUse) { // something got busy since the plan
			r.Refused = convert.Blockers(inUse.Blocked)
			return r
		}
		if err == nil {
			r.Ops = opStrings(res)
		}
		observe(e.metrics, opCarve, start, err)
	}
	if err == nil && !recorded {
		err = e.ledger.PutCarved(t, prof)
	}
	if err != nil {
		r.Error = errContext + err.Error()
	}
	return r
}

// uncarveGone uncarves what vgpud carved for an earlier config that the
// config no longer names (a GPU, or a virtual mdev parent), unless a vGPU
// of it is in use; a target gone from the host is simply forgotten. e.host
// is held.
func (e *Engine) uncarveGone(ctx context.Context, t vgpu.Target) api.GPUReport {
	name := t.String()
	r := api.GPUReport{GPU: name, Action: "uncarve"}
	if e.Changing(name) {
		r.Error = changingError()
		return r
	}
	start := time.Now()
	var res carve.Result
	err := e.inIntent(ledger.IntentUncarve, t, "config no longer names it", nil, func() error {
		var err error
		res, err = e.carver.Uncarve(ctx, t, carve.Options{})
		return err
	})
	var inUse *carve.InUseError
	switch {
	case errors.As(err, &inUse):
		r.Refused = convert.Blockers(inUse.Blocked)
		return r
	case gone(t, err):
		e.log.Warn("reconcile: carved earlier but no longer on the host; forgetting it", "target", name, "err", err)
		err = nil
	case err == nil:
		r.Ops = opStrings(res)
	}
	if res.Applied > 0 || err != nil {
		observe(e.metrics, opUncarve, start, err)
	}
	if err == nil {
		err = e.ledger.DeleteCarved(t)
	}
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// gone reports whether err says t has left the host.
func gone(t vgpu.Target, err error) bool {
	if t.IsParent() {
		return errors.Is(err, mdev.ErrNoParent)
	}
	return errors.Is(err, pci.ErrNoDevice) || errors.Is(err, inventory.ErrNotGPU)
}

func opStrings(res carve.Result) []string {
	var out []string
	for _, o := range res.Plan.Ops[:res.Applied] {
		out = append(out, o.String())
	}
	return out
}

// inIntent runs change of t between BeginIntent and EndIntent: a crash
// inside leaves the intent open for the next start to find. The intent
// ends whatever change returns: its outcome is reported, and the next
// reconcile plans from live state anyway. Its detail is what; a virtual
// parent's intent, which has no GPU, names the parent first.
func (e *Engine) inIntent(kind ledger.IntentKind, t vgpu.Target, what string, data any, change func() error) error {
	detail := what
	if t.IsParent() {
		detail = strings.TrimSpace(t.Describe() + ": " + what)
	}
	var id uint64
	err := e.ledger.Update(func(tx *ledger.Tx) error {
		var err error
		id, err = tx.BeginIntentData(kind, t.GPU, detail, data)
		return err
	})
	if err != nil {
		return err
	}
	cerr := change()
	if err := e.ledger.EndIntent(id); err != nil {
		return errors.Join(cerr, err)
	}
	return cerr
}

// Carve carves t (a GPU, or a virtual mdev parent such as mbochs)
// with prof on request (vgpuctl carve through the API). Unlike reconcile
// it may force, and it does not make t managed by the config: a reconcile
// leaves GPUs and parents the config never named alone.
func (e *Engine) Carve(ctx context.Context, t vgpu.Target, prof string, opt carve.Options) (carve.Result, error) {
	if err := mdevctl.Check(e.fs, e.mdevctlDir, []mdevctl.Target{{Target: t}}); err != nil {
		return carve.Result{}, err
	}
	return e.manual(ctx, ledger.IntentCarve, t, prof, opt, func() (carve.Result, error) {
		return e.carver.Carve(ctx, t, prof, opt)
	})
}

// Uncarve uncarves t on request (vgpuctl uncarve through the API).
func (e *Engine) Uncarve(ctx context.Context, t vgpu.Target, opt carve.Options) (carve.Result, error) {
	return e.manual(ctx, ledger.IntentUncarve, t, "", opt, func() (carve.Result, error) {
		return e.carver.Uncarve(ctx, t, opt)
	})
}

// ErrChanging: a carve or uncarve of the GPU is under way.
var ErrChanging = errors.New("a carve or uncarve of this GPU is under way")

// ErrPending: a forced change outlived the engine's wait (ForceWait): the
// kernel holds a removal until the VM using the vGPU lets go, and the
// change goes on without its caller.
var ErrPending = errors.New("still waiting for a VM to let go")

// DefaultForceWait is how long a forced carve or uncarve's caller waits.
const DefaultForceWait = 30 * time.Second

// manual runs a requested carve or uncarve of t in a ledger intent. Its kernel
// writes run outside the host lock: a forced removal waits in the kernel
// until the VM lets go of its device, and prepare, release and reserve on
// other GPUs must not wait behind it. Meanwhile owner is marked changing:
// nothing is allocated on it, prepare of its vGPUs and reconcile of it are
// refused, and the carver's per-GPU lock orders changes to the GPU itself.
// A forced change answers within ForceWait: past it, ErrPending, and the
// change finishes (intent, log, metrics, mark) on its own.
func (e *Engine) manual(ctx context.Context, kind ledger.IntentKind, t vgpu.Target, prof string, opt carve.Options,
	run func() (carve.Result, error)) (carve.Result, error) {
	// owner: the GPU's address, or the virtual parent's name.
	owner := t.String()
	if opt.DryRun {
		e.host.RLock()
		defer e.host.RUnlock()
		return run()
	}
	e.host.Lock()
	err := change.Begin(ctx)
	if err == nil {
		err = e.markChanging(owner)
	}
	e.host.Unlock()
	if err != nil {
		return carve.Result{}, err
	}
	target := t.Describe()
	type outcome struct {
		res carve.Result
		err error
	}
	done := make(chan outcome, 1)
	work := func() {
		res, err := e.manualWork(kind, t, prof, opt, run)
		e.host.Lock()
		e.unmarkChanging(owner)
		e.invalidate()
		e.host.Unlock()
		done <- outcome{res, err}
	}
	if !opt.Force || e.forceWait <= 0 {
		work()
		o := <-done
		return o.res, o.err
	}
	go work()
	timer := time.NewTimer(e.forceWait)
	defer timer.Stop()
	select {
	case o := <-done:
		return o.res, o.err
	case <-timer.C:
		e.log.Warn("forced change still waiting for a VM to let go of a vGPU; it goes on", "target", target, "waited", e.forceWait)
		return carve.Result{}, fmt.Errorf("%s %s: %w after %s: the kernel removes a vGPU only once the VM using it lets go "+
			"(it asks the VM to); the change goes on in vgpud, which logs its end; vgpuctl gpus shows the GPU as it is",
			opOf(kind), target, ErrPending, e.forceWait)
	}
}

// opOf names a manual change's kind as metrics and messages do.
func opOf(kind ledger.IntentKind) string {
	if kind == ledger.IntentUncarve {
		return opUncarve
	}
	return opCarve
}

// manualWork is manual's change itself, in its intent, logged and timed.
func (e *Engine) manualWork(kind ledger.IntentKind, t vgpu.Target, prof string, opt carve.Options,
	run func() (carve.Result, error)) (carve.Result, error) {
	start := time.Now()
	var res carve.Result
	err := e.inIntent(kind, t, prof, nil, func() error {
		var err error
		res, err = run()
		return err
	})
	op := opOf(kind)
	observe(e.metrics, op, start, err)
	if err != nil {
		e.log.Warn(op+" refused or failed", "target", t.Describe(), "profile", prof, "force", opt.Force, "err", err)
	} else if res.Applied > 0 {
		e.log.Info(op+" done", "target", t.Describe(), "profile", prof, "force", opt.Force, "ops", res.Applied)
	}
	return res, err
}

// markChanging claims owner for a manual change; e.host is held.
func (e *Engine) markChanging(owner string) error {
	e.changeMu.Lock()
	defer e.changeMu.Unlock()
	if e.changing[owner] {
		return fmt.Errorf("change %s: %w; wait for it to end", owner, ErrChanging)
	}
	e.changing[owner] = true
	return nil
}

func (e *Engine) unmarkChanging(owner string) {
	e.changeMu.Lock()
	delete(e.changing, owner)
	e.changeMu.Unlock()
}

// Changing reports whether a manual carve or uncarve of owner (a GPU's
// address, a virtual parent's name) is under way.
func (e *Engine) Changing(owner string) bool {
	e.changeMu.Lock()
	defer e.changeMu.Unlock()
	return e.changing[owner]
}

func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

// sortReports orders a report's GPUs by address.
func sortReports(rs []api.GPUReport) {
	slices.SortFunc(rs, func(a, b api.GPUReport) int {
		switch {
		case a.GPU < b.GPU:
			return -1
		case a.GPU > b.GPU:
			return 1
		}
		return 0
	})
}
