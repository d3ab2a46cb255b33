package virt

import "errors"

// DefaultURI is where virsh goes as root when neither -c nor
// LIBVIRT_DEFAULT_URI nor libvirt.conf's uri_default says otherwise.
const DefaultURI = "qemu:///system"

// Sentinels callers branch on with errors.Is. The libvirt error is
// wrapped too, so errors.Is(err, libvirt.ERR_NO_DOMAIN) also holds.
var (
	// ErrNoDomain: no domain has that name, UUID or id.
	ErrNoDomain = errors.New("no such domain")
	// ErrUnsupported: the hypervisor driver cannot do this (device
	// hotplug on a driver without it, say).
	ErrUnsupported = errors.New("not supported by the hypervisor driver")
	// ErrInvalidState: the domain is not in a state that allows this: a
	// live change to a stopped domain, a config change to a transient one.
	ErrInvalidState = errors.New("operation not valid in the domain's state")
	// ErrConnect: libvirt could not be reached at all.
	ErrConnect = errors.New("cannot connect to libvirt")
)

// Error is a libvirt failure said for a host admin: the action and object,
// then libvirt's own message when it adds something.
type Error struct {
	Action string // "attach the hostdev of vf 0000:03:00.2 to web01 (config) on qemu:///system"
	Detail string // libvirt's message; "" when Action says it all
	Kind   error  // one of the sentinels, or nil
	Err    error  // the libvirt.Error
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return e.Action
	}
	return e.Action + ": " + e.Detail
}

func (e *Error) Unwrap() []error {
	if e.Kind == nil {
		return []error{e.Err}
	}
	return []error{e.Kind, e.Err}
}
