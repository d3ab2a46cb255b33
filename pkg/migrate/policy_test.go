package migrate

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const mb = 1 << 20

// precopy simulates QEMU's RAM precopy: each pass sends what remains at
// the bandwidth while the guest dirties its working set; QEMU stops the
// guest once the remainder plus the devices' stop-copy state fit in the
// downtime limit.
type precopy struct {
	ram, wss  uint64  // bytes: guest RAM, and what the guest keeps dirtying
	dirty, bw float64 // bytes/s
	samples   int     // job-stat samples per pass (the run polls often)
	// measured, when set, is what the dirty-rate measurement before the
	// migration saw (the guest changed since).
	measured float64
}

type outcome struct {
	done      bool
	downtime  time.Duration
	passes    int
	decisions []Decision
	reason    string
}

func (p precopy) run(t *testing.T, l Limits) outcome {
	t.Helper()
	// What a one-second dirty-rate measurement sees: unique pages, so a
	// small hot set shows as its size per second, however often rewritten.
	measured := min(p.dirty, float64(p.wss))
	if p.measured > 0 {
		measured = p.measured
	}
	start, _, err := Plan(l, measured, p.bw)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if start > l.MaxDowntime {
		t.Fatalf("plan starts at %s, above the cap %s", start, l.MaxDowntime)
	}
	dev := float64(l.stopCopyBytes())
	rem, limit, paused := p.ram, start, false
	var samples []Sample
	var o outcome
	var elapsed time.Duration
	for pass := 1; pass <= 200; pass++ {
		for i := 0; i < max(1, p.samples); i++ {
			samples = append(samples, Sample{Elapsed: elapsed, Iteration: uint64(pass), Total: p.ram, Remaining: rem,
				DirtyRate: p.dirty, Bandwidth: p.bw, Downtime: limit, Paused: paused})
			d := Decide(l, samples)
			if d.Action != Continue {
				o.decisions = append(o.decisions, d)
			}
			switch d.Action {
			case SetDowntime:
				if d.Downtime <= limit || d.Downtime > l.MaxDowntime {
					t.Fatalf("pass %d: downtime %s -> %s (cap %s)", pass, limit, d.Downtime, l.MaxDowntime)
				}
				limit = d.Downtime
			case Pause:
				paused = true
			case Abort:
				o.reason, o.passes = d.Reason, pass
				return o
			}
		}
		if need := seconds((float64(rem) + dev) / p.bw); need <= limit {
			o.done, o.downtime, o.passes = true, need, pass
			return o
		}
		took := float64(rem) / p.bw
		elapsed += seconds(took)
		rem = min(p.wss, uint64(p.dirty*took))
		if paused {
			rem = 0
		}
	}
	t.Fatalf("no outcome after 200 passes (remaining %d, limit %s)", rem, limit)
	return o
}

func TestPolicy(t *testing.T) {
	const bw = 100 * mb
	nv := Device{ID: "0000:41:00.4", Driver: "nvidia", NoPause: true}
	xe := Device{ID: "0000:03:00.1", Driver: "xe", StopCopyBytes: 20 * mb} // no precopy: 200 ms at 100 MiB/s
	for _, c := range []struct {
		name      string
		p         precopy
		l         Limits
		done      bool
		escalated bool
		paused    bool
		reason    []string
	}{
		{name: "idle", p: precopy{ram: 1024 * mb, wss: 0, dirty: 0, bw: bw},
			l: Limits{MaxDowntime: 500 * time.Millisecond}, done: true},
		{name: "dirtying slower than the link", p: precopy{ram: 1024 * mb, wss: 512 * mb, dirty: 40 * mb, bw: bw, samples: 3},
			l: Limits{MaxDowntime: 500 * time.Millisecond}, done: true},
		{name: "small hot set faster than the link: escalates and fits", p: precopy{ram: 1024 * mb, wss: 25 * mb, dirty: 300 * mb, bw: bw, samples: 4},
			l: Limits{MaxDowntime: 500 * time.Millisecond}, done: true, escalated: true},
		{name: "hot set too big: aborts at the cap", p: precopy{ram: 1024 * mb, wss: 200 * mb, dirty: 300 * mb, bw: bw, samples: 2},
			l: Limits{MaxDowntime: 300 * time.Millisecond}, reason: []string{"at the downtime cap 300ms", "--allow-pause"}},
		{name: "hot set grows after the measurement: escalates, then aborts", p: precopy{ram: 1024 * mb, wss: 200 * mb, dirty: 300 * mb, bw: bw, measured: 10 * mb},
			l: Limits{MaxDowntime: 300 * time.Millisecond}, escalated: true, reason: []string{"at the downtime cap 300ms"}},
		{name: "hot set too big, pause allowed", p: precopy{ram: 1024 * mb, wss: 200 * mb, dirty: 300 * mb, bw: bw},
			l: Limits{MaxDowntime: 300 * time.Millisecond, AllowPause: true}, done: true, paused: true},
		{name: "NVIDIA cannot pause", p: precopy{ram: 1024 * mb, wss: 200 * mb, dirty: 300 * mb, bw: bw},
			l:      Limits{MaxDowntime: 300 * time.Millisecond, AllowPause: true, Devices: []Device{nv}},
			reason: []string{"0000:41:00.4 (nvidia) cannot migrate a paused guest"}},
		{name: "stop-copy device state counts in the downtime", p: precopy{ram: 1024 * mb, wss: 15 * mb, dirty: 300 * mb, bw: bw},
			l: Limits{MaxDowntime: 500 * time.Millisecond, Devices: []Device{xe}}, done: true, escalated: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.p.run(t, c.l)
			var escalated, paused bool
			for _, d := range o.decisions {
				escalated = escalated || d.Action == SetDowntime
				paused = paused || d.Action == Pause
			}
			if o.done != c.done || escalated != c.escalated || paused != c.paused {
				t.Fatalf("done %v escalated %v paused %v after %d passes (downtime %s, reason %q, decisions %+v); want %v %v %v",
					o.done, escalated, paused, o.passes, o.downtime, o.reason, o.decisions, c.done, c.escalated, c.paused)
			}
			if o.done && o.downtime > c.l.MaxDowntime {
				t.Fatalf("finished with downtime %s above the cap %s", o.downtime, c.l.MaxDowntime)
			}
			for _, r := range c.reason {
				if !strings.Contains(o.reason, r) {
					t.Fatalf("abort reason %q lacks %q", o.reason, r)
				}
			}
			for _, d := range o.decisions {
				if d.Reason == "" {
					t.Fatalf("decision %+v logs no reason", d)
				}
			}
		})
	}
}

// TestPlan: the start never exceeds the cap, covers the device floor, and
// a cap below the floor is refused before anything moves.
func TestPlan(t *testing.T) {
	xe := Device{ID: "0000:03:00.1", Driver: "xe", StopCopyBytes: 100 * mb}
	if _, _, err := Plan(Limits{MaxDowntime: 500 * time.Millisecond, Devices: []Device{xe}}, 0, 100*mb); !errors.Is(err, ErrCannotConverge) ||
		!strings.Contains(err.Error(), "100.0 MiB of state") || !strings.Contains(err.Error(), "takes 1s") {
		t.Fatalf("plan below the floor: %v", err)
	}
	start, why, err := Plan(Limits{MaxDowntime: 500 * time.Millisecond, Devices: []Device{{ID: "x", StopCopyBytes: 10 * mb}}}, 0, 100*mb)
	if err != nil || start < 100*time.Millisecond || start > 500*time.Millisecond || !strings.Contains(why, "floor 100ms") {
		t.Fatalf("plan with a 100 ms floor = %s %q %v", start, why, err)
	}
	if start, _, _ := Plan(Limits{MaxDowntime: 200 * time.Millisecond}, 1000*mb, 100*mb); start != 200*time.Millisecond {
		t.Fatalf("plan for a hot guest starts at %s, want the cap", start)
	}
	if start, _, _ := Plan(Limits{MaxDowntime: 2 * time.Second}, 0, 100*mb); start != minDowntime {
		t.Fatalf("plan for an idle guest starts at %s", start)
	}
	if _, why, _ := Plan(Limits{MaxDowntime: 2 * time.Second}, 0, 0); why != "dirty rate 0.0 MiB/s vs libvirt's default bandwidth" {
		t.Fatalf("plan without a bandwidth says %q", why)
	}
	if _, _, err := Plan(Limits{}, 0, 1); err == nil {
		t.Fatal("a zero cap was accepted")
	}
}

// TestDecideOncePerPass: many samples inside one pass raise the limit once.
func TestDecideOncePerPass(t *testing.T) {
	l := Limits{MaxDowntime: time.Second}
	var ss []Sample
	for pass := uint64(1); pass <= 3; pass++ {
		ss = append(ss, Sample{Iteration: pass, Remaining: 100 * mb, Bandwidth: 100 * mb, DirtyRate: 300 * mb, Downtime: 50 * time.Millisecond})
	}
	if d := Decide(l, ss); d.Action != SetDowntime {
		t.Fatalf("after 2 stalled passes: %+v", d)
	}
	ss = append(ss, ss[len(ss)-1])
	if d := Decide(l, ss); d.Action != Continue {
		t.Fatalf("a second sample of the same pass: %+v", d)
	}
}
