//go:build cgo

package virt

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"libvirt.org/go/libvirt"
)

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

// RunningDomains names the running domains, sorted.
func (c *Conn) RunningDomains() ([]string, error) {
	ds, err := c.c.ListAllDomains(libvirt.CONNECT_LIST_DOMAINS_ACTIVE)
	if err != nil {
		return nil, wrap(err, "list the running domains of %s", c.uri)
	}
	var out []string
	for i := range ds {
		if n, err := ds[i].GetName(); err == nil {
			out = append(out, n)
		}
		_ = ds[i].Free()
	}
	slices.Sort(out)
	return out, nil
}

// DomainState is one domain as ListDomains finds it.
type DomainState struct {
	UUID   string
	Name   string
	Active bool
	// XML is the live definition of a running domain (hotplugged devices
	// included), else the persistent one.
	XML []byte
}

// ListDomains returns every domain libvirt knows, running or defined,
// sorted by name. A domain undefined while it is read is left out.
func (c *Conn) ListDomains() ([]DomainState, error) {
	ds, err := c.c.ListAllDomains(0)
	if err != nil {
		return nil, wrap(err, "list the domains of %s", c.uri)
	}
	var out []DomainState
	var errs []error
	for i := range ds {
		d, err := c.domain(&ds[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st := DomainState{UUID: strings.ToLower(d.uuid), Name: d.name}
		if st.Active, err = d.Active(); err == nil {
			st.XML, err = d.XML(Live) // a stopped domain's is its persistent one
		}
		_ = d.Close()
		switch {
		case err == nil:
			out = append(out, st)
		case !errors.Is(err, libvirt.ERR_NO_DOMAIN):
			errs = append(errs, err)
		}
	}
	slices.SortFunc(out, func(a, b DomainState) int { return strings.Compare(a.Name, b.Name) })
	return out, errors.Join(errs...)
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
