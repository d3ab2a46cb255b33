package daemon

import (
	"fmt"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
)

// systemd notification, in two small functions as containerd does: one
// sends a state, one says how often the watchdog wants to hear from us.
// Both are no-ops outside systemd (no NOTIFY_SOCKET / WATCHDOG_USEC).

// notify sends state (sd.SdNotifyReady, ...) to systemd's NOTIFY_SOCKET. It
// reports whether anything was listening.
func notify(state string) (bool, error) {
	sent, err := sd.SdNotify(false, state)
	if err != nil {
		return false, fmt.Errorf("notify systemd %q: %w", state, err)
	}
	return sent, nil
}

// watchdogInterval is how often to send WATCHDOG=1: half of WATCHDOG_USEC,
// so one late ping does not get us killed; 0 when no watchdog is set.
func watchdogInterval() (time.Duration, error) {
	d, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		return 0, fmt.Errorf("read the systemd watchdog settings: %w", err)
	}
	return d / 2, nil
}
