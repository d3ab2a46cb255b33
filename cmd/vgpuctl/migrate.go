package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/migrate"
	"github.com/vgpu-project/vgpu/pkg/migrate/virtmigrate"
	"github.com/vgpu-project/vgpu/pkg/virt"
)

// migrateOpts are vgpuctl migrate's flags and arguments.
type migrateOpts struct {
	uri, domain string
	all         bool
	virtmigrate.Options
}

func newMigrateCmd(g *globals) *cobra.Command {
	var o migrateOpts
	var bandwidth string
	cmd := &cobra.Command{
		Use:   "migrate DOMAIN DEST_URI | --all DEST_URI",
		Short: "Live-migrate a VM and its vGPUs to another host",
		Long: `Move the running libvirt domain DOMAIN, with its vGPUs, to the libvirt at
DEST_URI (qemu+ssh://host-b/system, qemu+tcp://, qemu+tls://, as virsh takes
them), peer to peer.

Before anything moves, vgpuctl checks both ends (libvirt >= 8.6 and QEMU >= 8.1
for vGPUs, distinct hosts), every hostdev (only vGPUs vgpu manages, whose vendor
driver migrates per the profile catalog; no whole-GPU passthrough), no virtual
IOMMU, and QEMU's own blocked reasons. The destination's hook then leases
matching vGPUs and refuses a different type, vendor driver or driver version;
its line is shown here and the source is untouched. With --dry-run the
destination answers a probe instead (a migration its hook always refuses,
saying whether it would lease the vGPUs and how many are free); nothing moves.

vgpuctl measures the guest's dirty rate during the first pass and sets the
downtime limit to what resending a second of it takes (never above
--max-downtime); a guest that dirties faster than the link sends, more than the
cap holds, is refused there and then unless it may be slowed or paused. It
watches every pass: when passes stop shrinking what remains, it raises the limit
toward the cap; at the cap it slows the guest's vCPUs step by step (QEMU's
auto-converge, kept at 1% until needed; --no-throttle: never), then aborts, or
with --allow-pause pauses the guest to finish (not for vendor drivers that
cannot migrate a paused guest). Device state that moves only with the guest
stopped counts toward the downtime; a cap below it is refused.

On success the destination's persistent definition names the destination's
vGPUs and the source's vGPUs are free. On failure, Ctrl-C or timeout the job is
aborted and the VM keeps running on the source with its vGPUs attached. A run
interrupted by a crash is settled by running the same command again.

--all drains this host: every running domain with a vGPU (--with-plain: every
running domain), one after another or --parallel N at once, starting none after
the first failure unless --keep-going, then a table of what moved. Migrations
at once share the link: each guest's passes, its last one too, go at its share,
which vgpuctl's plan for it follows.

Exit codes: 0 migrated; 1 refused by a check, nothing moved; 2 bad input;
4 left unfinished (a rollback or the finish failed: run the command again);
5 aborted or failed and rolled back: the VM still runs on the source.`,
		Example: `  vgpuctl migrate web01 qemu+ssh://host-b/system --max-downtime 500ms
  vgpuctl migrate web01 qemu+tcp://host-b/system --bandwidth 1000MiB --timeout 10m -o json
  vgpuctl migrate web01 qemu+ssh://host-b/system --dry-run
  vgpuctl migrate --all qemu+ssh://host-b/system --undefine-source`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case o.all && len(args) == 1:
				o.Dest = args[0]
			case !o.all && len(args) == 2:
				o.domain, o.Dest = args[0], args[1]
			default:
				return usage.Errorf("%s takes DOMAIN DEST_URI, or --all DEST_URI; see %s --help", cmd.CommandPath(), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.MaxDowntime <= 0 {
				return usage.Errorf("--max-downtime %s: must be positive", o.MaxDowntime)
			}
			if !o.all && (o.KeepGoing || o.WithPlain || o.Parallel != 1) {
				return usage.Errorf("--keep-going, --with-plain and --parallel go with --all")
			}
			if o.Parallel < 1 {
				return usage.Errorf("--parallel %d: must be at least 1", o.Parallel)
			}
			bw, err := parseBandwidth(bandwidth)
			if err != nil {
				return usage.Wrap(err)
			}
			o.Bandwidth = bw
			return g.migrate(cmd, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.uri, "connect", "c", "", "source libvirt URI, as virsh -c (default: $LIBVIRT_DEFAULT_URI, else "+virt.DefaultURI+" as root)")
	fl.StringVar(&o.MigrateURI, "migrate-uri", "", "where QEMU's migration stream goes, as virsh --migrateuri (default: the destination's host name)")
	fl.BoolVar(&o.all, "all", false, "migrate every running domain with a vGPU (drain the host)")
	fl.BoolVar(&o.KeepGoing, "keep-going", false, "with --all, go on after a domain fails")
	fl.BoolVar(&o.WithPlain, "with-plain", false, "with --all, also the running domains without a vGPU")
	fl.IntVar(&o.Parallel, "parallel", 1, "with --all, migrate this many domains at once")
	fl.DurationVar(&o.MaxDowntime, "max-downtime", 500*time.Millisecond, "the most the guest may be stopped")
	fl.StringVar(&bandwidth, "bandwidth", "", "cap the migration stream, e.g. 1000MiB (per second; default: libvirt's)")
	fl.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "abort and roll back after this long (0: never)")
	fl.BoolVar(&o.NoThrottle, "no-throttle", false, "never slow the guest's vCPUs (QEMU's auto-converge) to converge at the cap")
	fl.BoolVar(&o.AllowPause, "allow-pause", false, "pause the guest to finish when it cannot converge at the cap")
	fl.BoolVar(&o.UndefineSource, "undefine-source", false, "remove the source's persistent definition once the VM moved")
	fl.BoolVar(&o.DryRun, "dry-run", false, "run the checks, print the plan and the destination's answer to a probe; change nothing")
	return cmd
}

// parseBandwidth reads "1000MiB", "1GiB" or "800" (MiB) per second.
func parseBandwidth(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	mult := uint64(1)
	num := strings.TrimSuffix(strings.TrimSuffix(s, "/s"), "iB")
	switch {
	case strings.HasSuffix(num, "G"):
		mult, num = 1024, strings.TrimSuffix(num, "G")
	case strings.HasSuffix(num, "M"):
		num = strings.TrimSuffix(num, "M")
	}
	v, err := strconv.ParseUint(num, 10, 32)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("--bandwidth %q: want MiB or GiB per second, e.g. 1000MiB or 2GiB", s)
	}
	return v * mult, nil
}

// progress shows a run's events: one line rewritten in place on a
// terminal (at most twice a second), a line per fact otherwise, or one
// JSON object per line with -o json.
type progress struct {
	// mu serializes the writes of every progress on w (migrations at
	// once print to one terminal).
	mu       *sync.Mutex
	w        io.Writer
	json     bool
	tty      bool
	domain   string
	last     time.Time
	lineOpen bool
	noTrack  bool // a vGPU without dirty tracking: every pinned page is dirty
}

// newProgress shows on w; live: one line rewritten in place on a terminal
// (not with migrations at once, whose lines would overwrite each other).
func newProgress(w io.Writer, mu *sync.Mutex, asJSON, live bool) *progress {
	p := &progress{w: w, mu: mu, json: asJSON}
	if f, ok := w.(*os.File); ok && !asJSON && live {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		p.tty = err == nil
	}
	return p
}

// jsonEvent is an Event as -o json prints it: the domain added.
type jsonEvent struct {
	Domain string `json:"domain"`
	migrate.Event
}

// Devices implements virtmigrate.Progress: a vGPU without dirty tracking
// shows in the progress line.
func (p *progress) Devices(devs []migrate.Device) {
	for _, dv := range devs {
		p.noTrack = p.noTrack || dv.DirtyTracking == "none"
	}
}

// Event implements virtmigrate.Progress.
func (p *progress) Event(e migrate.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		b, err := json.Marshal(jsonEvent{Domain: p.domain, Event: e})
		if err == nil {
			fmt.Fprintf(p.w, "%s\n", b)
		}
		return
	}
	if e.Sample != nil {
		if !p.tty || e.Time.Sub(p.last) < 500*time.Millisecond {
			return
		}
		p.last = e.Time
		fmt.Fprintf(p.w, "\r\033[K%s", p.line(e))
		p.lineOpen = true
		return
	}
	if p.lineOpen {
		fmt.Fprintln(p.w)
		p.lineOpen = false
	}
	switch {
	case e.Result != nil && e.Phase == migrate.PhaseDone:
		p.summary(*e.Result)
	case e.Decision != "":
		fmt.Fprintf(p.w, "%s: %s: %s\n", p.domain, e.Decision, e.Message)
	case e.Message != "":
		fmt.Fprintf(p.w, "%s: %s: %s\n", p.domain, e.Phase, e.Message)
	}
}

// line is the progress line: phase, pass, RAM left, dirty rate vs
// bandwidth, device data, downtime limit, ETA.
func (p *progress) line(e migrate.Event) string {
	s := e.Sample
	eta := "-"
	if e.ETA > 0 {
		eta = e.ETA.Round(100 * time.Millisecond).String()
	}
	tracking := ""
	if p.noTrack {
		tracking = " (no dirty tracking: all pinned pages dirty)"
	}
	phase := fmt.Sprintf("migrate pass %d", s.Iteration)
	if s.StopCopy {
		phase = fmt.Sprintf("stop-copy after pass %d (guest stopped)", s.Iteration)
	}
	throttle := ""
	if s.Throttle > 0 {
		throttle = fmt.Sprintf("  throttle %d%%", s.Throttle)
	}
	return fmt.Sprintf("%s: %s  RAM left %s of %s  dirty %s vs %s%s  device %s  limit %s%s  ETA %s",
		p.domain, phase, mibs(s.Remaining), mibs(s.Total), mibps(s.DirtyRate), mibps(s.Bandwidth), tracking,
		byteCount(s.DeviceBytes), s.Downtime.Round(time.Millisecond), throttle, eta)
}

func (p *progress) summary(r migrate.Result) {
	fmt.Fprintf(p.w, "%s: migrated in %s; downtime %s (QEMU); RAM %s, device %s; %d passes; started at limit %s (%s)\n",
		p.domain, r.Total.Round(time.Millisecond), r.Downtime.Round(time.Millisecond), mibs(r.RAMBytes), byteCount(r.DeviceBytes),
		r.Iterations, r.Start.Round(time.Millisecond), r.StartWhy)
	if r.Throttle > 0 {
		fmt.Fprintf(p.w, "%s:   vCPUs throttled up to %d%%\n", p.domain, r.Throttle)
	}
	for _, d := range r.Decisions {
		fmt.Fprintf(p.w, "%s:   %s\n", p.domain, d)
	}
}

func mibs(b uint64) string      { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
func mibps(b float64) string    { return fmt.Sprintf("%.1f MiB/s", b/(1<<20)) }
func byteCount(b uint64) string { return strconv.FormatUint(b, 10) + " B" }
