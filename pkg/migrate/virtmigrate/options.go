package virtmigrate

import (
	"errors"
	"time"

	"github.com/vgpu-project/vgpu/pkg/migrate"
)

// Options are a run's choices, vgpuctl migrate's flags.
type Options struct {
	Dest       string // the destination libvirt's URI
	MigrateURI string // where QEMU's stream goes ("": the destination's host name)
	// Drain's: go on after a failure, take domains without a vGPU too,
	// migrate this many at once.
	KeepGoing, WithPlain bool
	Parallel             int
	MaxDowntime          time.Duration
	NoThrottle           bool
	Bandwidth            uint64 // MiB/s, 0: libvirt's default
	Timeout              time.Duration
	AllowPause           bool
	UndefineSource       bool
	DryRun               bool
}

// Progress is where the migration of one domain reports.
type Progress interface {
	Event(migrate.Event)
	// Devices names, once known, the vGPUs whose state migrates.
	Devices([]migrate.Device)
}

// ErrChecks marks a refusal by the checks: nothing moved.
var ErrChecks = errors.New("refused by the checks; nothing moved")

// ErrBadInput marks a domain the source does not have.
var ErrBadInput = errors.New("bad input")

// inputError is a refusal whose message is its cause's alone.
type inputError struct{ err error }

func (e inputError) Error() string   { return e.err.Error() }
func (e inputError) Unwrap() []error { return []error{e.err, ErrBadInput} }
