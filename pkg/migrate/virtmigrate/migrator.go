//go:build cgo

package virtmigrate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/hook"
	"github.com/vgpu-project/vgpu/pkg/migrate"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/qmp"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
	"github.com/vgpu-project/vgpu/pkg/virt"
)

// Migrator migrates domains from one libvirt to another with their
// vGPUs: both connections, the options, and where it reports.
type Migrator struct {
	Src, Dst *virt.Conn
	Options
	Catalog *profile.Catalog
	// Vgpud is the source's vgpud, nil when none answers on Socket; the
	// answer must not change during the run (Drain asks once before
	// migrations at once do).
	Vgpud  func(context.Context) *client.Client
	Socket string
	// Progress is where the migration of domain reports.
	Progress func(domain string) Progress
}

// One migrates the domain named name.
func (m *Migrator) One(ctx context.Context, name string) (migrate.Result, error) {
	d, err := m.Src.LookupDomain(name)
	if errors.Is(err, virt.ErrNoDomain) {
		return migrate.Result{}, inputError{err}
	}
	if err != nil {
		return migrate.Result{}, err
	}
	defer d.Close()
	p := m.Progress(d.Name())

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
		c := m.Vgpud(ctx)
		if c == nil {
			return migrate.Result{}, fmt.Errorf("%w: %s has vGPUs and vgpud does not answer on %s; it must run to hand them over (systemctl start vgpud)",
				ErrChecks, d.Name(), m.Socket)
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
	source := &virtSource{d: d, params: virt.MigrateParams{DestURI: m.Dest, MigrateURI: m.MigrateURI, Bandwidth: m.Bandwidth,
		UndefineSource: m.UndefineSource, AutoConverge: !m.NoThrottle}, vgpus: hasVGPUs}
	dest := &virtDest{conn: m.Dst, uuid: d.UUID(), name: d.Name()}
	opts := migrate.Options{Timeout: m.Timeout, Measure: time.Second, Report: p.Event,
		Limits: migrate.Limits{MaxDowntime: m.MaxDowntime, Bandwidth: float64(m.Bandwidth) * (1 << 20), AllowPause: m.AllowPause, Shared: m.Parallel > 1,
			Throttle: !m.NoThrottle}}

	// An interrupted earlier run first: it may have moved the domain.
	if res, done, err := migrate.Resolve(ctx, source, dest, led, opts); err != nil || done {
		return res, err
	}
	facts, devs, err := m.facts(d, live, dom, drivers)
	if err != nil {
		return migrate.Result{}, err
	}
	opts.Limits.Devices = devs
	p.Devices(devs)
	if errs := migrate.Check(facts); len(errs) > 0 {
		return migrate.Result{}, fmt.Errorf("%w: %w", ErrChecks, errors.Join(errs...))
	}
	if m.DryRun {
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
	p.Event(migrate.Event{Time: time.Now(), Phase: migrate.PhaseReserve,
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
func (m *Migrator) probe(ctx context.Context, p Progress, d *virt.Domain, dom domxml.Domain, f migrate.Facts) error {
	doc, err := m.destXML(ctx, d, dom, f.Src.Hostname, true, true)
	if err != nil {
		return err
	}
	err = d.Migrate(virt.MigrateParams{DestURI: m.Dest, MigrateURI: probeURI, DestXML: doc})
	if err == nil {
		return fmt.Errorf("the probe migration of %s to %s was not refused by the destination and completed: the domain runs there now", d.Name(), f.Dst.URI)
	}
	admits, answer, ok := hook.ParseProbe(err.Error())
	switch {
	case !ok:
		return fmt.Errorf("%w: %s (%s) gave no vgpu answer to the probe for %s; is vgpu-hook installed there (vgpuctl hook install) and vgpud running? libvirt said: %w",
			ErrChecks, f.Dst.Hostname, f.Dst.URI, d.Name(), err)
	case !admits:
		return fmt.Errorf("%w: %s (%s) refuses %s: %s", ErrChecks, f.Dst.Hostname, f.Dst.URI, d.Name(), answer)
	}
	p.Event(migrate.Event{Time: time.Now(), Phase: "probe", Message: fmt.Sprintf("%s admits: %s", f.Dst.Hostname, answer)})
	return nil
}

// destXML is the live XML a migration (or its probe) hands the
// destination: with the origin of the domain's vGPUs when it has some.
func (m *Migrator) destXML(ctx context.Context, d *virt.Domain, dom domxml.Domain, host string, vgpus, probe bool) ([]byte, error) {
	doc, err := d.MigratableXML(false)
	if err != nil || !vgpus {
		return doc, err
	}
	return withOrigin(ctx, m.Vgpud(ctx), doc, dom, host, probe)
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
func (m *Migrator) facts(d *virt.Domain, live []byte, dom domxml.Domain, drivers map[string]string) (migrate.Facts, []migrate.Device, error) {
	f := migrate.Facts{Domain: d.Name()}
	var err error
	if f.Active, err = d.Active(); err != nil {
		return f, nil, err
	}
	sh, err := m.Src.Host()
	if err != nil {
		return f, nil, err
	}
	dh, err := m.Dst.Host()
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
					p, known := m.Catalog.Get(dom.Request.Profile)
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
func (m *Migrator) plan(ctx context.Context, p Progress, d *virt.Domain, f migrate.Facts, o migrate.Options) error {
	p.Event(migrate.Event{Time: time.Now(), Phase: "check", Message: fmt.Sprintf("checks passed: %s (%s, libvirt %s, QEMU %s) -> %s (%s, libvirt %s, QEMU %s), %d hostdevs",
		f.Src.Hostname, f.Src.URI, virt.Version(f.Src.Libvirt), virt.Version(f.Src.QEMU),
		f.Dst.Hostname, f.Dst.URI, virt.Version(f.Dst.Libvirt), virt.Version(f.Dst.QEMU), len(f.Hostdevs))})
	rate, err := d.DirtyRate(ctx, time.Second)
	if err != nil {
		p.Event(migrate.Event{Time: time.Now(), Phase: migrate.PhaseMeasure, Message: fmt.Sprintf("cannot measure the dirty rate: %v", err)})
	}
	start, why, err := migrate.Plan(o.Limits, rate, o.Limits.Bandwidth)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrChecks, err)
	}
	p.Event(migrate.Event{Time: time.Now(), Phase: "plan", Message: fmt.Sprintf("would start at downtime limit %s (%s; cap %s, timeout %s); nothing was changed (--dry-run)",
		start.Round(time.Millisecond), why, o.Limits.MaxDowntime, o.Timeout)})
	return nil
}

// Outcome is what Drain did with one domain: moved, stayed or (a dry
// run) would move, and why.
type Outcome struct{ Domain, Outcome, Why string }

// Drain migrates those of names (the running domains, in the order
// libvirt lists them) that have a vGPU (WithPlain: all), Parallel at
// once; none starts after a failure unless KeepGoing, nor after an
// interrupt. It returns an outcome for each domain it considered, and the
// failures.
func (m *Migrator) Drain(ctx context.Context, names []string) ([]Outcome, error) {
	// Probed once, before migrations at once ask for it.
	m.Vgpud(ctx)
	rows := make([]*Outcome, len(names))
	var (
		mu     sync.Mutex
		failed error
		wg     sync.WaitGroup
	)
	stop := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return failed != nil && !m.KeepGoing
	}
	slots := make(chan struct{}, m.Parallel)
	for i, n := range names {
		if ctx.Err() != nil {
			break
		}
		d, err := m.Src.LookupDomain(n)
		if err != nil {
			rows[i] = &Outcome{n, "stayed", err.Error()}
			continue
		}
		x, err := d.XML(virt.Live)
		_ = d.Close()
		if err != nil {
			rows[i] = &Outcome{n, "stayed", err.Error()}
			continue
		}
		if dom, err := domxml.Parse(x); !m.WithPlain && (err != nil || dom.Request == nil || len(dom.Hostdevs) == 0) {
			continue // no vGPU: not this drain's business
		}
		slots <- struct{}{} // a migration ended, or fewer than --parallel run
		if stop() || ctx.Err() != nil {
			<-slots
			rows[i] = &Outcome{n, "stayed", "not tried: an earlier domain failed"}
			if ctx.Err() != nil {
				rows[i].Why = "not tried: interrupted"
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			res, err := m.One(ctx, n)
			r := &Outcome{n, "moved", fmt.Sprintf("%s, downtime %s", res.Total.Round(time.Millisecond), res.Downtime.Round(time.Millisecond))}
			switch {
			case err != nil:
				r = &Outcome{n, "stayed", strings.Join(strings.Fields(err.Error()), " ")}
			case m.DryRun:
				r = &Outcome{n, "would move", "checks passed"}
			case res.Throttle > 0:
				r.Why += fmt.Sprintf(", vCPUs throttled up to %d%%", res.Throttle)
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
	var shown []Outcome
	for _, r := range rows {
		if r != nil {
			shown = append(shown, *r)
		}
	}
	return shown, failed
}
