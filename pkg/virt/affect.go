package virt

import "strings"

// Affect says which definitions of a domain a change goes to, as virsh's
// --config and --live do.
type Affect uint

const (
	// Config is the persistent definition: the next start sees the change.
	Config Affect = 1 << iota
	// Live is the running domain: a hotplug, lost at its stop.
	Live
)

func (a Affect) String() string {
	var parts []string
	if a&Config != 0 {
		parts = append(parts, "config")
	}
	if a&Live != 0 {
		parts = append(parts, "live")
	}
	return strings.Join(parts, "+")
}
