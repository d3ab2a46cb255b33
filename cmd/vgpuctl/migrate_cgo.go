//go:build cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/hook"
	"github.com/vgpu-project/vgpu/pkg/migrate"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/qmp"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
	"github.com/vgpu-project/vgpu/pkg/virt"
)

// errChecks marks a refusal by the checks: nothing moved (exit 1).
var errChecks = errors.New("refused by the checks; nothing moved")

func (g *globals) migrate(cmd *cobra.Command, o migrateOpts) error {
	ctx := cmd.Context()
	src, err := virt.Connect(o.uri)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := virt.Connect(o.dest)
	if err != nil {
		return err
	}
	defer dst.Close()
	cat, err := g.catalog()
	if err != nil {
		return err
	}
	m := &migration{g: g, src: src, dst: dst, o: o, cat: cat, out: cmd.OutOrStdout()}
	if o.all {
		return m.drain(ctx)
	}
	_, err = m.one(ctx, o.domain)
	return err
}

// migration is one vgpuctl migrate: both connections and the options.
type migration struct {
	g        *globals
	src, dst *virt.Conn
	o        migrateOpts
	cat      *profile.Catalog
	out      interface{ Write([]byte) (int, error) }
	// outMu serializes the output of migrations at once.
	outMu sync.Mutex
}

// one migrates the domain named name.
func (m *migration) one(ctx context.Context, name string) (migrate.Result, error) {
	d, err := m.src.LookupDomain(name)
	if errors.Is(err, virt.ErrNoDomain) {
		return migrate.Result{}, usageError{err}
	}
	if err != nil {
		return migrate.Result{}, err
	}
	defer d.Close()
	p := newProgress(m.out, &m.outMu, m.g.output == "json", m.o.parallel == 1)
	p.domain = d.Name()

	live, err := d.XML(virt.Live)
	if err != nil {
		return migrate.Result{}, err
	}
	dom, err := domxml.Parse(live)
	if err != nil {
		return migrate.Result{}, fmt.Errorf("read the XML of %s: %w", d.Name(), err)
	}
	hasVGPUs := dom.Request != nil && len(dom.Hostdevs) > 0
	led := migrate.Ledger(noLedger{})
	drivers := map[string]string{} // each vGPU's driver here
	if hasVGPUs {
		c := m.g.vgpud(ctx)
		if c == nil {
			return migrate.Result{}, fmt.Errorf("%w: %s has vGPUs and vgpud does not answer on %s; it must run to hand them over (systemctl start vgpud)",
				errChecks, d.Name(), m.g.socket)
		}
		led = vgpudLedger{c: c, uuid: d.UUID()}
		vs, err := c.VGPUs(ctx)
		if err != nil {
			return migrate.Result{}, fmt.Errorf("list the vGPUs of this host for %s: %w", d.Name(), err)
		}
		for _, v := range vs {
			drivers[v.ID] = v.Driver
		}
	}
	source := &virtSource{d: d, params: virt.MigrateParams{DestURI: m.o.dest, MigrateURI: m.o.migrateURI, Bandwidth: m.o.bandwidth,
		UndefineSource: m.o.undefineSource, AutoConverge: !m.o.noThrottle}, vgpus: hasVGPUs}
	dest := &virtDest{conn: m.dst, uuid: d.UUID(), name: d.Name()}
	opts := migrate.Options{Timeout: m.o.timeout, Measure: time.Second, Report: p.event,
		Limits: migrate.Limits{MaxDowntime: m.o.maxDowntime, Bandwidth: float64(m.o.bandwidth) * (1 << 20), AllowPause: m.o.allowPause,
			Throttle: !m.o.noThrottle}}

	// An interrupted earlier run first: it may have moved the domain.
	if res, done, err := migrate.Resolve(ctx, source, dest, led, opts); err != nil || done {
		return res, err
	}
	facts, devs, err := m.facts(d, live, dom, drivers)
	if err != nil {
		return migrate.Result{}, err
	}
	opts.Limits.Devices = devs
	for _, dv := range devs {
		p.noTrack = p.noTrack || dv.DirtyTracking == "none"
	}
	if errs := migrate.Check(facts); len(errs) > 0 {
		return migrate.Result{}, fmt.Errorf("%w: %w", errChecks, errors.Join(errs...))
	}
	if m.o.dryRun {
		if err := m.plan(ctx, p, d, facts, opts); err != nil || !hasVGPUs {
			return migrate.Result{}, err
		}
		return migrate.Result{}, m.probe(ctx, p, d, dom, facts)
	}
	if source.params.DestXML, err = m.destXML(ctx, d, dom, facts.Src.Hostname, hasVGPUs, false); err != nil {
		return migrate.Result{}, err
	}
	if persistent, err := d.Persistent(); err != nil {
		return migrate.Result{}, err
	} else if persistent {
		if source.params.PersistXML, err = d.MigratableXML(true); err != nil {
			return migrate.Result{}, err
		}
	}
	p.event(migrate.Event{Time: time.Now(), Phase: migrate.PhaseReserve,
		Message: fmt.Sprintf("checks passed: %s (%s) -> %s (%s), %d vGPUs", facts.Src.Hostname, facts.Src.URI, facts.Dst.Hostname, facts.Dst.URI, len(devs))})
	return migrate.Run(ctx, source, dest, led, opts)
}

// probeURI is where a probe migration's stream would go: an address of
// TEST-NET-1 (RFC 5737), which no host holds, so that even a destination
// whose hook does not know probes cannot receive the domain.
const probeURI = "tcp://192.0.2.1:49152"

// probe asks the destination's hook, by a migration it always refuses
// (the probe mark in the request's origin), whether it would lease the
// domain's vGPUs: the destination's capacity for --dry-run, through
// libvirt's own authenticated transport.
func (m *migration) probe(ctx context.Context, p *progress, d *virt.Domain, dom domxml.Domain, f migrate.Facts) error {
	doc, err := m.destXML(ctx, d, dom, f.Src.Hostname, true, true)
	if err != nil {
		return err
	}
	err = d.Migrate(virt.MigrateParams{DestURI: m.o.dest, MigrateURI: probeURI, DestXML: doc})
	if err == nil {
		return fmt.Errorf("the probe migration of %s to %s was not refused by the destination and completed: the domain runs there now", d.Name(), f.Dst.URI)
	}
	admits, answer, ok := hook.ParseProbe(err.Error())
	switch {
	case !ok:
		return fmt.Errorf("%w: %s (%s) gave no vgpu answer to the probe for %s; is vgpu-hook installed there (vgpuctl hook install) and vgpud running? libvirt said: %w",
			errChecks, f.Dst.Hostname, f.Dst.URI, d.Name(), err)
	case !admits:
		return fmt.Errorf("%w: %s (%s) refuses %s: %s", errChecks, f.Dst.Hostname, f.Dst.URI, d.Name(), answer)
	}
	p.event(migrate.Event{Time: time.Now(), Phase: "probe", Message: fmt.Sprintf("%s admits: %s", f.Dst.Hostname, answer)})
	return nil
}

// destXML is the live XML a migration (or its probe) hands the
// destination: with the origin of the domain's vGPUs when it has some.
func (m *migration) destXML(ctx context.Context, d *virt.Domain, dom domxml.Domain, host string, vgpus, probe bool) ([]byte, error) {
	doc, err := d.MigratableXML(false)
	if err != nil || !vgpus {
		return doc, err
	}
	return withOrigin(ctx, m.g.vgpud(ctx), doc, dom, host, probe)
}

// withOrigin puts into the destination's XML what the domain's vGPUs are
// here (type, vendor driver and its version, from vgpud), for the
// destination's hook to refuse vGPUs that differ; probe marks a --dry-run
// probe, which the hook answers and refuses.
func withOrigin(ctx context.Context, c *client.Client, doc []byte, dom domxml.Domain, host string, probe bool) ([]byte, error) {
	vs, err := c.VGPUs(ctx)
	if err != nil {
		return nil, err
	}
	o := domxml.Origin{Host: host, Probe: probe}
	for _, v := range vs {
		if v.ID == dom.Hostdevs[0].ID() {
			o.Type, o.Driver, o.Version = v.Type, v.VendorDriver, v.DriverVersion
		}
	}
	r := *dom.Request
	r.Origin = &o
	return domxml.SetRequest(doc, &r)
}

// facts gathers what the checks look at; drivers are the vGPUs' drivers
// on this host, by id.
func (m *migration) facts(d *virt.Domain, live []byte, dom domxml.Domain, drivers map[string]string) (migrate.Facts, []migrate.Device, error) {
	f := migrate.Facts{Domain: d.Name()}
	var err error
	if f.Active, err = d.Active(); err != nil {
		return f, nil, err
	}
	sh, err := m.src.Host()
	if err != nil {
		return f, nil, err
	}
	dh, err := m.dst.Host()
	if err != nil {
		return f, nil, err
	}
	f.Src = migrate.End{URI: sh.URI, Hostname: sh.Hostname, UUID: sh.UUID, Libvirt: sh.Libvirt, QEMU: sh.QEMU}
	f.Dst = migrate.End{URI: dh.URI, Hostname: dh.Hostname, UUID: dh.UUID, Libvirt: dh.Libvirt, QEMU: dh.QEMU}
	var x libvirtxml.Domain
	if err := x.Unmarshal(string(live)); err != nil {
		return f, nil, fmt.Errorf("read the XML of %s: %w", d.Name(), err)
	}
	var devs []migrate.Device
	if x.Devices != nil {
		f.VIOMMU = x.Devices.IOMMU != nil
		for i, h := range x.Devices.Hostdevs {
			v, ok := domxml.VGPUOfHostdev(h, i, vgpu.KindVF)
			if !ok {
				f.Hostdevs = append(f.Hostdevs, migrate.Hostdev{ID: fmt.Sprintf("#%d (not PCI or mdev)", i+1)})
				continue
			}
			hd := migrate.Hostdev{ID: v.ID(), Driver: drivers[v.ID()]}
			if dom.Request != nil {
				if rv, ok := dom.Request.Find(v.ID()); ok {
					hd.VGPU, hd.Kind = true, string(rv.Kind)
					p, known := m.cat.Get(dom.Request.Profile)
					hd.Model = dom.Request.Profile
					if known {
						hd.Model = p.Model.Name
						if mig := p.Model.Migration; mig != nil {
							dv := migrate.Device{ID: v.ID(), Driver: p.Model.Name, StopCopyBytes: p.StopCopyBytes(),
								NoPause: mig.NoPause, DirtyTracking: mig.DirtyTracking}
							hd.Migration = &dv
							devs = append(devs, dv)
						}
					}
				}
			}
			f.Hostdevs = append(f.Hostdevs, hd)
		}
	}
	if f.Active {
		if info, err := qmp.QueryMigrate(d.QMP()); err == nil {
			f.Blocked = info.BlockedReasons
		}
	}
	return f, devs, nil
}

// plan prints what a run would do (--dry-run): the checks passed, the
// measured dirty rate and the downtime plan.
func (m *migration) plan(ctx context.Context, p *progress, d *virt.Domain, f migrate.Facts, o migrate.Options) error {
	p.event(migrate.Event{Time: time.Now(), Phase: "check", Message: fmt.Sprintf("checks passed: %s (%s, libvirt %s, QEMU %s) -> %s (%s, libvirt %s, QEMU %s), %d hostdevs",
		f.Src.Hostname, f.Src.URI, virt.Version(f.Src.Libvirt), virt.Version(f.Src.QEMU),
		f.Dst.Hostname, f.Dst.URI, virt.Version(f.Dst.Libvirt), virt.Version(f.Dst.QEMU), len(f.Hostdevs))})
	rate, err := d.DirtyRate(ctx, time.Second)
	if err != nil {
		p.event(migrate.Event{Time: time.Now(), Phase: migrate.PhaseMeasure, Message: fmt.Sprintf("cannot measure the dirty rate: %v", err)})
	}
	start, why, err := migrate.Plan(o.Limits, rate, o.Limits.Bandwidth)
	if err != nil {
		return fmt.Errorf("%w: %w", errChecks, err)
	}
	p.event(migrate.Event{Time: time.Now(), Phase: "plan", Message: fmt.Sprintf("would start at downtime limit %s (%s; cap %s, timeout %s); nothing was changed (--dry-run)",
		start.Round(time.Millisecond), why, o.Limits.MaxDowntime, o.Timeout)})
	return nil
}

// drain migrates every running domain with a vGPU (with --with-plain,
// every running domain), --parallel at once, in the order libvirt lists
// them; none starts after a failure unless --keep-going, nor after an
// interrupt.
func (m *migration) drain(ctx context.Context) error {
	names, err := m.src.RunningDomains()
	if err != nil {
		return err
	}
	// Probed once, before migrations at once ask for it.
	m.g.vgpud(ctx)
	type row struct{ name, outcome, why string }
	rows := make([]*row, len(names))
	var (
		mu     sync.Mutex
		failed error
		wg     sync.WaitGroup
	)
	stop := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return failed != nil && !m.o.keepGoing
	}
	slots := make(chan struct{}, m.o.parallel)
	for i, n := range names {
		if ctx.Err() != nil {
			break
		}
		d, err := m.src.LookupDomain(n)
		if err != nil {
			rows[i] = &row{n, "stayed", err.Error()}
			continue
		}
		x, err := d.XML(virt.Live)
		_ = d.Close()
		if err != nil {
			rows[i] = &row{n, "stayed", err.Error()}
			continue
		}
		if dom, err := domxml.Parse(x); !m.o.withPlain && (err != nil || dom.Request == nil || len(dom.Hostdevs) == 0) {
			continue // no vGPU: not this drain's business
		}
		slots <- struct{}{} // a migration ended, or fewer than --parallel run
		if stop() || ctx.Err() != nil {
			<-slots
			rows[i] = &row{n, "stayed", "not tried: an earlier domain failed"}
			if ctx.Err() != nil {
				rows[i].why = "not tried: interrupted"
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			res, err := m.one(ctx, n)
			r := &row{n, "moved", fmt.Sprintf("%s, downtime %s", res.Total.Round(time.Millisecond), res.Downtime.Round(time.Millisecond))}
			switch {
			case err != nil:
				r = &row{n, "stayed", strings.Join(strings.Fields(err.Error()), " ")}
			case m.o.dryRun:
				r = &row{n, "would move", "checks passed"}
			case res.Throttle > 0:
				r.why += fmt.Sprintf(", vCPUs throttled up to %d%%", res.Throttle)
			}
			mu.Lock()
			defer mu.Unlock()
			rows[i] = r
			if err != nil {
				failed = errors.Join(failed, err)
			}
		}()
	}
	wg.Wait()
	var shown []row
	for _, r := range rows {
		if r != nil {
			shown = append(shown, *r)
		}
	}
	if m.g.output == "json" {
		out := make([]map[string]string, len(shown))
		for i, r := range shown {
			out[i] = map[string]string{"domain": r.name, "outcome": r.outcome, "why": r.why}
		}
		if err := writeJSON(m.out, out); err != nil {
			return err
		}
	} else {
		tr := make([][]string, len(shown))
		for i, r := range shown {
			tr[i] = []string{r.name, r.outcome, r.why}
		}
		if err := table(m.out, []string{"DOMAIN", "OUTCOME", "WHY"}, tr); err != nil {
			return err
		}
	}
	return failed
}

// virtSource is migrate.Source over libvirt.
type virtSource struct {
	d      *virt.Domain
	params virt.MigrateParams
	vgpus  bool
	// pending is a job reading libvirt has not answered yet: a hot TCG
	// guest can keep QEMU's monitor busy for minutes, and the watch must
	// go on (deadline, Ctrl-C, abort). One reading at a time.
	pending chan statsReading
}

type statsReading struct {
	s      migrate.Sample
	active bool
	err    error
}

// statsWait is how long one Stats call waits for libvirt's answer.
const statsWait = 2 * time.Second

func (s *virtSource) DirtyRate(ctx context.Context, period time.Duration) (float64, error) {
	return s.d.DirtyRate(ctx, period)
}
func (s *virtSource) Migrate(context.Context) error { return s.d.Migrate(s.params) }

// The controls of a running job are bounded: seen here, libvirt 9 can
// block a downtime change made as the job completes far longer than the
// job itself, and the run must go on watching the job's end.
func (s *virtSource) SetDowntime(t time.Duration) error {
	return bounded("set the downtime limit", controlLimit, func() error { return s.d.SetMaxDowntime(t) })
}
func (s *virtSource) Pause() error { return bounded("pause the guest", controlLimit, s.d.Suspend) }

// Throttle sets QEMU's auto-converge parameters so that its next step
// takes pct percent of the vCPUs' time: the first step (cpu-throttle-
// initial) and the most (max-cpu-throttle) both pct, and a step up large
// enough to reach it. libvirt sets none of them unless asked, and keeps
// no max-cpu-throttle: 0 gives QEMU's defaults back.
func (s *virtSource) Throttle(pct int) error {
	p := map[string]any{"cpu-throttle-initial": pct, "cpu-throttle-increment": migrate.MaxThrottle, "max-cpu-throttle": pct}
	if pct == 0 {
		p = map[string]any{"cpu-throttle-initial": 20, "cpu-throttle-increment": 10, "max-cpu-throttle": migrate.MaxThrottle}
	}
	// A throttle ceiling takes effect at QEMU's next trigger, passes later:
	// a monitor busy as the job starts (seen: 10 s) need not stall the
	// watch that long; the call goes on, and the policy asks again.
	return bounded("set the vCPU throttle", throttleLimit, func() error {
		if err := qmp.SetMigrateParameters(s.d.QMP(), p); err != nil {
			return fmt.Errorf("set the vCPU throttle of %s to %d%%: %w", s.d.Name(), pct, err)
		}
		return nil
	})
}
func (s *virtSource) Abort() error { return bounded("abort the job", controlLimit, s.d.AbortJob) }

// controlLimit bounds one control call of a running job, throttleLimit a
// change of the throttle ceiling.
const (
	controlLimit  = 10 * time.Second
	throttleLimit = 2 * time.Second
)

// bounded runs fn, giving up waiting after limit (fn goes on in the
// background; its answer is dropped).
func bounded(what string, limit time.Duration, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		return fmt.Errorf("%s: libvirt did not answer within %s", what, limit)
	}
}

func (s *virtSource) Running() (bool, error) {
	ok, err := s.d.Active()
	if errors.Is(err, virt.ErrNoDomain) {
		return false, nil // transient, and gone to the destination
	}
	return ok, err
}

func (s *virtSource) Stats() (migrate.Sample, bool, error) {
	if s.pending == nil {
		ch := make(chan statsReading, 1)
		s.pending = ch
		go func() {
			sm, active, err := s.readStats()
			ch <- statsReading{sm, active, err}
		}()
	}
	select {
	case r := <-s.pending:
		s.pending = nil
		return r.s, r.active, r.err
	case <-time.After(statsWait):
		return migrate.Sample{}, false, fmt.Errorf("read the migration job of %s: %w within %s", s.d.Name(), migrate.ErrNoAnswer, statsWait)
	}
}

func (s *virtSource) readStats() (migrate.Sample, bool, error) {
	j, err := s.d.Job(false)
	if errors.Is(err, virt.ErrNoDomain) {
		return migrate.Sample{}, false, nil // gone with the job (--undefine-source): no job here
	}
	if err == nil && j.Ending != "" {
		return migrate.Sample{}, false, fmt.Errorf("%s: %w", j.Ending, migrate.ErrEnding)
	}
	if err != nil || !j.Active {
		return migrate.Sample{}, false, err
	}
	sm := migrate.Sample{Elapsed: j.Elapsed, Iteration: j.Iteration, Total: j.Total, Remaining: j.Remaining,
		DirtyRate: j.DirtyRate, Bandwidth: j.Bandwidth, DeviceBytes: j.Device, Throttle: j.Throttle}
	if s.vgpus {
		// libvirt has no stop-copy phase, and before 10.6 no VFIO figure;
		// QEMU has both.
		if info, err := qmp.QueryMigrate(s.d.QMP()); err == nil {
			sm.StopCopy = info.Status == "device"
			if !j.DeviceSet && info.VFIO != nil {
				sm.DeviceBytes = info.VFIO.Transferred
			}
		}
	}
	return sm, true, nil
}

// virtDest is migrate.Dest over libvirt.
type virtDest struct {
	conn       *virt.Conn
	uuid, name string
}

func (t *virtDest) Running() (bool, error) {
	d, err := t.conn.LookupDomain(t.uuid)
	if errors.Is(err, virt.ErrNoDomain) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer d.Close()
	return d.Active()
}

// Finish points the destination's persistent definition at the vGPUs the
// domain runs with there (the hook rewrote only the live one): a later
// start must get the destination's vGPUs, never whatever sits at the
// source's addresses (CVE-2020-17376). It returns the completed job.
func (t *virtDest) Finish(context.Context) (migrate.Completed, error) {
	d, err := t.conn.LookupDomain(t.uuid)
	if err != nil {
		return migrate.Completed{}, err
	}
	defer d.Close()
	var c migrate.Completed
	if j, err := d.Job(true); err == nil {
		c = migrate.Completed{Downtime: j.Downtime, RAMBytes: j.Processed, Iterations: j.Iteration,
			DeviceBytes: j.Device, DeviceSet: j.DeviceSet, IterateSet: j.Iteration > 0}
	}
	if persistent, err := d.Persistent(); err != nil || !persistent {
		return c, err
	}
	return c, fixPersistent(d)
}

// fixPersistent rewrites the persistent definition's vGPU sources to the
// live ones, by request index.
func fixPersistent(d *virt.Domain) error {
	live, err := d.XML(virt.Live)
	if err != nil {
		return err
	}
	cfg, err := d.XML(virt.Config)
	if err != nil {
		return err
	}
	ld, err := domxml.Parse(live)
	if err != nil {
		return fmt.Errorf("read the live XML of %s on the destination: %w", d.Name(), err)
	}
	cd, err := domxml.Parse(cfg)
	if err != nil {
		return fmt.Errorf("read the persistent XML of %s on the destination: %w", d.Name(), err)
	}
	if ld.Request == nil || cd.Request == nil {
		return nil
	}
	moves := map[string]domxml.VGPU{}
	for _, v := range cd.Request.VGPUs {
		for _, lv := range ld.Request.VGPUs {
			if lv.Index == v.Index && lv.ID() != v.ID() {
				moves[v.ID()] = lv
			}
		}
	}
	if len(moves) == 0 {
		return nil
	}
	out, err := domxml.Rewrite(cfg, moves)
	if err != nil {
		return fmt.Errorf("point the persistent definition of %s at the destination's vGPUs: %w", d.Name(), err)
	}
	_, err = d.Conn().Define(out)
	return err
}

// vgpudLedger is migrate.Ledger over the source vgpud's API.
type vgpudLedger struct {
	c    *client.Client
	uuid string
}

func (l vgpudLedger) phase(ctx context.Context, p string) error {
	_, err := l.c.Migration(ctx, l.uuid, p)
	return err
}

func (l vgpudLedger) Begin(ctx context.Context) error    { return l.phase(ctx, api.MigrationBegin) }
func (l vgpudLedger) Commit(ctx context.Context) error   { return l.phase(ctx, api.MigrationCommit) }
func (l vgpudLedger) Rollback(ctx context.Context) error { return l.phase(ctx, api.MigrationRollback) }

func (l vgpudLedger) Migrating(ctx context.Context) (bool, error) {
	h, err := l.c.Allocations(ctx)
	if err != nil {
		return false, err
	}
	for _, a := range h.Allocations {
		if a.DomainUUID == l.uuid && a.State == "migrating" {
			return true, nil
		}
	}
	return false, nil
}

// noLedger is the ledger of a domain without vGPUs: nothing to hand over.
type noLedger struct{}

func (noLedger) Begin(context.Context) error             { return nil }
func (noLedger) Commit(context.Context) error            { return nil }
func (noLedger) Rollback(context.Context) error          { return nil }
func (noLedger) Migrating(context.Context) (bool, error) { return false, nil }
