// Package virt is vgpu's only door to libvirt (libvirt.org/go/libvirt, cgo):
// connect, find a domain, attach and detach vGPU hostdevs, read the domain
// XML and write our metadata. Everything above it speaks domxml types and
// this package's sentinel errors, never libvirt's.
package virt

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"libvirt.org/go/libvirt"
)

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

// wrap classifies a libvirt error; nil stays nil.
func wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	e := &Error{Action: fmt.Sprintf(format, args...), Detail: err.Error(), Err: err}
	var le libvirt.Error
	if errors.As(err, &le) {
		e.Detail = le.Message
	}
	switch {
	case errors.Is(err, libvirt.ERR_NO_DOMAIN):
		e.Kind = ErrNoDomain
	case errors.Is(err, libvirt.ERR_NO_SUPPORT), errors.Is(err, libvirt.ERR_OPERATION_UNSUPPORTED):
		e.Kind = ErrUnsupported
	case errors.Is(err, libvirt.ERR_OPERATION_INVALID):
		e.Kind = ErrInvalidState
	case errors.Is(err, libvirt.ERR_NO_CONNECT), errors.Is(err, libvirt.ERR_AUTH_FAILED):
		e.Kind = ErrConnect
	}
	return e
}

// Conn is one connection to libvirt. Close it.
type Conn struct {
	c   *libvirt.Connect
	uri string
}

// Connect opens a read-write connection to uri. An empty uri lets libvirt
// choose exactly as virsh does without -c: LIBVIRT_DEFAULT_URI, then
// uri_default in libvirt.conf, then DefaultURI as root.
func Connect(uri string) (*Conn, error) {
	c, err := libvirt.NewConnect(uri)
	if err != nil {
		name := uri
		if name == "" {
			name = "the default URI (" + DefaultURI + " unless LIBVIRT_DEFAULT_URI says otherwise)"
		}
		e := wrap(err, "connect to libvirt at %s", name).(*Error)
		e.Kind = ErrConnect
		return nil, e
	}
	if got, err := c.GetURI(); err == nil {
		uri = got
	}
	return &Conn{c: c, uri: uri}, nil
}

// URI is the URI the connection reached ("qemu:///system").
func (c *Conn) URI() string { return c.uri }

// Close ends the connection; every Domain of it must be closed first.
func (c *Conn) Close() error {
	if c == nil || c.c == nil {
		return nil
	}
	_, err := c.c.Close()
	c.c = nil
	return wrap(err, "close the libvirt connection to %s", c.uri)
}

// LookupDomain finds a domain as virsh does: by UUID, by name, by id.
func (c *Conn) LookupDomain(nameOrUUID string) (*Domain, error) {
	var d *libvirt.Domain
	var err error
	if _, perr := uuid.Parse(nameOrUUID); perr == nil && len(nameOrUUID) == 36 {
		d, err = c.c.LookupDomainByUUIDString(nameOrUUID)
	}
	if d == nil {
		d, err = c.c.LookupDomainByName(nameOrUUID)
	}
	if id, perr := strconv.ParseUint(nameOrUUID, 10, 32); d == nil && perr == nil {
		if byID, ierr := c.c.LookupDomainById(uint32(id)); ierr == nil {
			d, err = byID, nil
		}
	}
	if err != nil {
		e := wrap(err, "look up domain %s on %s", nameOrUUID, c.uri)
		if errors.Is(err, libvirt.ERR_NO_DOMAIN) {
			e = &Error{Action: fmt.Sprintf("no domain %s on %s", nameOrUUID, c.uri), Kind: ErrNoDomain, Err: err}
		}
		return nil, e
	}
	return c.domain(d)
}

// Define makes (or replaces) a persistent domain from its XML.
func (c *Conn) Define(doc []byte) (*Domain, error) {
	d, err := c.c.DomainDefineXML(string(doc))
	if err != nil {
		return nil, wrap(err, "define a domain on %s", c.uri)
	}
	return c.domain(d)
}

func (c *Conn) domain(d *libvirt.Domain) (*Domain, error) {
	name, err := d.GetName()
	if err == nil {
		var u string
		if u, err = d.GetUUIDString(); err == nil {
			return &Domain{d: d, conn: c, name: name, uuid: u}, nil
		}
	}
	_ = d.Free()
	return nil, wrap(err, "read a domain's name and UUID on %s", c.uri)
}
