package qmp

import (
	"context"
	"encoding/json"
	"fmt"

	goqmp "github.com/digitalocean/go-qemu/qmp"
)

// Passthrough runs one QMP command (JSON) and returns QEMU's reply (JSON),
// as libvirt's QemuMonitorCommand does.
type Passthrough func(cmd string) (string, error)

// Monitor is a go-qemu qmp.Monitor over a Passthrough. libvirt keeps the
// connection: Connect and Disconnect do nothing; events are libvirt's.
type Monitor struct{ run Passthrough }

var _ goqmp.Monitor = Monitor{}

// New returns the Monitor of run.
func New(run Passthrough) Monitor { return Monitor{run: run} }

func (Monitor) Connect() error    { return nil }
func (Monitor) Disconnect() error { return nil }

// Run implements goqmp.Monitor.
func (m Monitor) Run(cmd []byte) ([]byte, error) {
	out, err := m.run(string(cmd))
	return []byte(out), err
}

// Events implements goqmp.Monitor: libvirt delivers QEMU's events itself.
func (Monitor) Events(context.Context) (<-chan goqmp.Event, error) {
	return nil, goqmp.ErrEventsNotSupported
}

// reply is QMP's answer: a return value or an error.
type reply[T any] struct {
	Return T `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
}

func run[T any](m goqmp.Monitor, execute string) (T, error) { return call[T](m, execute, nil) }

// call runs execute with args and reads its reply.
func call[T any](m goqmp.Monitor, execute string, args map[string]any) (T, error) {
	var zero T
	c := goqmp.Command{Execute: execute}
	if args != nil {
		c.Args = args // a nil map in the interface would read "arguments": null
	}
	cmd, err := json.Marshal(c)
	if err != nil {
		return zero, err
	}
	out, err := m.Run(cmd)
	if err != nil {
		return zero, fmt.Errorf("QMP %s: %w", execute, err)
	}
	var r reply[T]
	if err := json.Unmarshal(out, &r); err != nil {
		return zero, fmt.Errorf("QMP %s: read the reply %.200q: %w", execute, out, err)
	}
	if r.Error != nil {
		return zero, fmt.Errorf("QMP %s: %s: %s", execute, r.Error.Class, r.Error.Desc)
	}
	return r.Return, nil
}

// MigrateInfo is what query-migrate says that libvirt does not.
type MigrateInfo struct {
	Status string `json:"status"`
	// BlockedReasons: why QEMU refuses to migrate now (QEMU >= 6.0), e.g.
	// "VFIO device doesn't support migration"; empty when nothing blocks.
	BlockedReasons []string `json:"blocked-reasons"`
	// VFIO is the device state sent so far (QEMU >= 8.1).
	VFIO *struct {
		Transferred uint64 `json:"transferred"`
	} `json:"vfio"`
}

// QueryMigrate runs query-migrate.
func QueryMigrate(m goqmp.Monitor) (MigrateInfo, error) {
	return run[MigrateInfo](m, "query-migrate")
}

// DirtyRate is query-dirty-rate's answer.
type DirtyRate struct {
	Status string `json:"status"` // unstarted, measuring, measured
	// MiBs is the rate in MiB/s ("dirty-rate"), once measured.
	MiBs int64 `json:"dirty-rate"`
}

// CalcDirtyRate starts QEMU's dirty-rate measurement over secs seconds by
// page sampling, which works while a migration runs (libvirt's own call
// needs a job a migration holds), hashing samplePages pages of each GiB
// of guest RAM (0: QEMU's 512).
func CalcDirtyRate(m goqmp.Monitor, secs, samplePages int) error {
	args := map[string]any{"calc-time": secs}
	if samplePages > 0 {
		args["sample-pages"] = samplePages
	}
	_, err := call[json.RawMessage](m, "calc-dirty-rate", args)
	return err
}

// SetMigrateParameters sets migration parameters libvirt does not (QMP
// migrate-set-parameters: max-cpu-throttle, say); QEMU takes them while a
// migration runs.
func SetMigrateParameters(m goqmp.Monitor, params map[string]any) error {
	_, err := call[json.RawMessage](m, "migrate-set-parameters", params)
	return err
}

// QueryDirtyRate reads the last measurement.
func QueryDirtyRate(m goqmp.Monitor) (DirtyRate, error) {
	return run[DirtyRate](m, "query-dirty-rate")
}
