//go:build cgo

package virtmigrate

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/vgpu-project/vgpu/pkg/migrate"
	"github.com/vgpu-project/vgpu/pkg/qmp"
	"github.com/vgpu-project/vgpu/pkg/virt"
)

// virtSource is migrate.Source over libvirt.
type virtSource struct {
	d      *virt.Domain
	params virt.MigrateParams
	vgpus  bool
	// pending is a job reading libvirt has not answered yet: a hot TCG
	// guest can keep QEMU's monitor busy for minutes, and the watch must
	// go on (deadline, Ctrl-C, abort). One reading at a time.
	pending chan statsReading
	// Changes of the downtime limit and of the throttle ceiling, each
	// kind applied in the order asked.
	downtime, throttle ordered
	// started: Migrate was called; the job's limit is no longer the start.
	started atomic.Bool
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
func (s *virtSource) Migrate(context.Context) error {
	s.started.Store(true)
	return s.d.Migrate(s.params)
}

// The controls of a running job are bounded: seen here, libvirt 9 can
// block a downtime change made as the job completes far longer than the
// job itself, and took over 10 s to answer the raise that follows the
// dirty-rate measurement, then applied it. The run must go on watching
// the job meanwhile; an unanswered change (migrate.ErrNoAnswer) still
// lands, in order. The start's limit is waited for longer: the job must
// not begin without it.
func (s *virtSource) SetDowntime(t time.Duration) error {
	limit := controlLimit
	if s.started.Load() {
		limit = changeLimit
	}
	return s.downtime.do("set the downtime limit", limit, func() error { return s.d.SetMaxDowntime(t) })
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
	return s.throttle.do("set the vCPU throttle", changeLimit, func() error {
		if err := qmp.SetMigrateParameters(s.d.QMP(), p); err != nil {
			return fmt.Errorf("set the vCPU throttle of %s to %d%%: %w", s.d.Name(), pct, err)
		}
		return nil
	})
}
func (s *virtSource) Abort() error { return bounded("abort the job", controlLimit, s.d.AbortJob) }

// controlLimit bounds the wait for a pause, an abort or the start's
// downtime limit; changeLimit for a change of the limit once the job runs,
// or of the throttle ceiling (the change goes on past it).
const (
	controlLimit = 10 * time.Second
	changeLimit  = 2 * time.Second
)

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
