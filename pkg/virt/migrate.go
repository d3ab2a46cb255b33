//go:build cgo

package virt

import (
	"context"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/vgpu-project/vgpu/pkg/qmp"
)

// Host is what a migration's checks need of one end.
type Host struct {
	URI      string
	Hostname string
	// UUID is the host's, from libvirt's capabilities (host_uuid in
	// libvirtd.conf when set): two ends with one UUID are one host.
	UUID string
	// Libvirt and QEMU versions as major*1e6 + minor*1e3 + micro.
	Libvirt, QEMU uint32
}

// Host describes the connection's host.
func (c *Conn) Host() (Host, error) {
	h := Host{URI: c.uri}
	var err error
	if h.Libvirt, err = c.c.GetLibVersion(); err != nil {
		return h, wrap(err, "read the libvirt version of %s", c.uri)
	}
	if h.QEMU, err = c.c.GetVersion(); err != nil {
		return h, wrap(err, "read the hypervisor version of %s", c.uri)
	}
	if h.Hostname, err = c.c.GetHostname(); err != nil {
		return h, wrap(err, "read the host name of %s", c.uri)
	}
	caps, err := c.c.GetCapabilities()
	if err != nil {
		return h, wrap(err, "read the capabilities of %s", c.uri)
	}
	var doc struct {
		Host struct {
			UUID string `xml:"uuid"`
		} `xml:"host"`
	}
	if err := xml.Unmarshal([]byte(caps), &doc); err != nil {
		return h, fmt.Errorf("read the capabilities of %s: %w", c.uri, err)
	}
	h.UUID = strings.ToLower(doc.Host.UUID)
	return h, nil
}

// Version renders a libvirt-style version number.
func Version(v uint32) string { return fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000) }

// MigratableXML is the domain's XML as a migration carries it: the live
// definition, or the persistent one when inactive.
func (d *Domain) MigratableXML(inactive bool) ([]byte, error) {
	f := libvirt.DOMAIN_XML_MIGRATABLE | libvirt.DOMAIN_XML_SECURE
	which := "live"
	if inactive {
		f |= libvirt.DOMAIN_XML_INACTIVE
		which = "persistent"
	}
	s, err := d.d.GetXMLDesc(f)
	if err != nil {
		return nil, wrap(err, "read the migratable %s XML of %s", which, d.name)
	}
	return []byte(s), nil
}

// DirtyRate measures how fast the guest dirties its memory over period
// (QEMU's calc-dirty-rate, page sampling), in bytes/s. It goes through the
// monitor passthrough, which works while a migration job runs; libvirt's
// own domdirtyrate-calc waits for that job to end.
func (d *Domain) DirtyRate(ctx context.Context, period time.Duration) (float64, error) {
	secs := max(1, int(period.Round(time.Second)/time.Second))
	m := d.QMP()
	if err := qmp.CalcDirtyRate(m, secs, d.samplePages()); err != nil {
		return 0, fmt.Errorf("measure the dirty rate of %s: %w", d.name, err)
	}
	deadline := time.Now().Add(time.Duration(secs)*time.Second + 10*time.Second)
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		r, err := qmp.QueryDirtyRate(m)
		if err != nil {
			return 0, fmt.Errorf("measure the dirty rate of %s: %w", d.name, err)
		}
		if r.Status == "measured" {
			return float64(r.MiBs) * (1 << 20), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("measure the dirty rate of %s: still %s after %s", d.name, r.Status, time.Duration(secs)*time.Second+10*time.Second)
		}
	}
}

// samplePages is how many pages of each GiB the dirty-rate measurement
// hashes: QEMU's 512 leaves a guest of a few GiB or less with a few
// hundred samples (a 64 MiB guest, 32: its rate known to within 1/32 of
// its RAM); at least 4096 in all, at most QEMU's 16384 per GiB.
func (d *Domain) samplePages() int {
	info, err := d.d.GetInfo()
	if err != nil || info.MaxMem == 0 {
		return 0
	}
	gib := float64(info.MaxMem) / (1 << 20) // KiB
	return int(min(16384, max(512, math.Ceil(4096/gib))))
}

// SetMaxDowntime sets the migration's downtime limit.
func (d *Domain) SetMaxDowntime(t time.Duration) error {
	ms := uint64(max(1, t.Milliseconds()))
	return wrap(d.d.MigrateSetMaxDowntime(ms, 0), "set the downtime limit of %s to %d ms", d.name, ms)
}

// MigrateParams are what one migration sends.
type MigrateParams struct {
	// DestURI is the destination libvirt (qemu+ssh://host-b/system).
	DestURI string
	// MigrateURI is where QEMU's stream goes (tcp://10.0.0.2), as virsh
	// --migrateuri; "": the destination's host name.
	MigrateURI string
	// DestXML is the live definition for the destination; PersistXML the
	// persistent one (nil: the domain is transient).
	DestXML, PersistXML []byte
	// Bandwidth in MiB/s (0: libvirt's default).
	Bandwidth uint64
	// UndefineSource removes the source's persistent definition once
	// the domain runs on the destination.
	UndefineSource bool
	// AutoConverge turns QEMU's auto-converge on for the job, which
	// throttles the vCPUs as QEMU's throttle parameters say (set through
	// the monitor: libvirt sets none unless asked).
	AutoConverge bool
}

// Migrate live-migrates the domain peer to peer (the source libvirtd
// talks to the destination's, as virsh migrate --p2p): it returns when
// the job ends, nil once the domain runs on the destination.
func (d *Domain) Migrate(p MigrateParams) error {
	params := &libvirt.DomainMigrateParameters{DestXMLSet: true, DestXML: string(p.DestXML)}
	flags := libvirt.MIGRATE_LIVE | libvirt.MIGRATE_PEER2PEER | libvirt.MIGRATE_ABORT_ON_ERROR
	if p.PersistXML != nil {
		params.PersistXMLSet, params.PersistXML = true, string(p.PersistXML)
		flags |= libvirt.MIGRATE_PERSIST_DEST
	}
	if p.MigrateURI != "" {
		params.URISet, params.URI = true, p.MigrateURI
	}
	if p.Bandwidth > 0 {
		params.BandwidthSet, params.Bandwidth = true, p.Bandwidth
	}
	if p.UndefineSource {
		flags |= libvirt.MIGRATE_UNDEFINE_SOURCE
	}
	if p.AutoConverge {
		flags |= libvirt.MIGRATE_AUTO_CONVERGE
	}
	return wrap(d.d.MigrateToURI3(p.DestURI, params, flags), "migrate %s to %s", d.name, p.DestURI)
}

// Job is a migration job's figures (virDomainGetJobStats).
type Job struct {
	// Active: a job runs (or, read as completed, one completed).
	Active bool
	// Ending says how a job that is over ended ("failed", "cancelled",
	// "completed") while libvirt still holds it: until its migration
	// protocol is done with the destination, libvirt reports the job so
	// and refuses another migration of the domain. "" otherwise.
	Ending     string
	Elapsed    time.Duration
	Iteration  uint64
	Total      uint64 // RAM bytes
	Remaining  uint64
	DirtyRate  float64 // bytes/s
	Bandwidth  float64 // bytes/s
	DeviceSet  bool
	Device     uint64 // VFIO bytes (libvirt >= 10.6)
	Downtime   time.Duration
	DowntimeOK bool
	Processed  uint64
	// Throttle is the share of the vCPUs' time (percent) auto-converge
	// takes now.
	Throttle int
}

// Job reads the domain's current job; completed reads the last finished
// one instead (on the destination after a migration).
func (d *Domain) Job(completed bool) (Job, error) {
	var f libvirt.DomainGetJobStatsFlags
	if completed {
		f = libvirt.DOMAIN_JOB_STATS_COMPLETED | libvirt.DOMAIN_JOB_STATS_KEEP_COMPLETED
	}
	s, err := d.d.GetJobStats(f)
	if err != nil {
		return Job{}, wrap(err, "read the job of %s", d.name)
	}
	active := s.Type == libvirt.DOMAIN_JOB_BOUNDED || s.Type == libvirt.DOMAIN_JOB_UNBOUNDED
	var ending string
	if completed {
		active = s.Type == libvirt.DOMAIN_JOB_COMPLETED
	} else {
		// libvirt 9 keeps the job's end status (qemu_migration.c sets it
		// as QEMU reports it) until it ends the async job after the
		// destination's Finish and its own Confirm.
		switch s.Type {
		case libvirt.DOMAIN_JOB_FAILED:
			ending = "failed"
		case libvirt.DOMAIN_JOB_CANCELLED:
			ending = "cancelled"
		case libvirt.DOMAIN_JOB_COMPLETED:
			ending = "completed"
		}
	}
	j := Job{Active: active, Ending: ending,
		Elapsed: time.Duration(s.TimeElapsed) * time.Millisecond, Iteration: s.MemIteration, Total: s.MemTotal,
		Remaining: s.MemRemaining, Bandwidth: float64(s.MemBps), Processed: s.MemProcessed,
		DeviceSet: s.VFIODataTransferredSet, Device: s.VFIODataTransferred,
		Downtime: time.Duration(s.Downtime) * time.Millisecond, DowntimeOK: s.DowntimeSet, Throttle: s.AutoConvergeThrottle}
	if s.MemDirtyRateSet {
		page := s.MemPageSize
		if page == 0 {
			page = uint64(os.Getpagesize())
		}
		j.DirtyRate = float64(s.MemDirtyRate * page)
	}
	return j, nil
}

// Suspend pauses the guest (a migration then finishes).
func (d *Domain) Suspend() error { return wrap(d.d.Suspend(), "pause %s", d.name) }

// AbortJob aborts the domain's job (a migration: the VM stays here).
func (d *Domain) AbortJob() error { return wrap(d.d.AbortJob(), "abort the job of %s", d.name) }

// QMP is a go-qemu monitor over libvirt's passthrough to the domain's QEMU.
func (d *Domain) QMP() qmp.Monitor {
	return qmp.New(func(cmd string) (string, error) {
		out, err := d.d.QemuMonitorCommand(cmd, libvirt.DOMAIN_QEMU_MONITOR_COMMAND_DEFAULT)
		return out, wrap(err, "ask the QEMU of %s", d.name)
	})
}
