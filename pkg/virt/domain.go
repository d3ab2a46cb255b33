//go:build cgo

package virt

import (
	"errors"
	"fmt"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-project/vgpu/pkg/domxml"
)

// deviceFlags is impact as the device calls take it: libvirt defines
// VIR_DOMAIN_DEVICE_MODIFY_CONFIG and _LIVE as VIR_DOMAIN_AFFECT_CONFIG and
// _LIVE (libvirt-domain.h).
func (a Affect) deviceFlags() libvirt.DomainDeviceModifyFlags {
	return libvirt.DomainDeviceModifyFlags(a.impact())
}

func (a Affect) impact() libvirt.DomainModificationImpact {
	var f libvirt.DomainModificationImpact
	if a&Config != 0 {
		f |= libvirt.DOMAIN_AFFECT_CONFIG
	}
	if a&Live != 0 {
		f |= libvirt.DOMAIN_AFFECT_LIVE
	}
	return f
}

// Domain is one libvirt domain. Close it.
type Domain struct {
	d          *libvirt.Domain
	conn       *Conn
	name, uuid string
}

// Close frees the domain object.
func (d *Domain) Close() error {
	if d == nil || d.d == nil {
		return nil
	}
	err := d.d.Free()
	d.d = nil
	return wrap(err, "free domain %s", d.name)
}

// Name and UUID are the domain's, as libvirt reported them at lookup.
func (d *Domain) Name() string { return d.name }
func (d *Domain) UUID() string { return d.uuid }

// Conn is the connection the domain was found on.
func (d *Domain) Conn() *Conn { return d.conn }

// URI is the connection's, for messages.
func (d *Domain) URI() string { return d.conn.uri }

// Active reports whether the domain runs.
func (d *Domain) Active() (bool, error) {
	ok, err := d.d.IsActive()
	return ok, wrap(err, "ask whether %s runs on %s", d.name, d.conn.uri)
}

// Persistent reports whether the domain has a persistent definition.
func (d *Domain) Persistent() (bool, error) {
	ok, err := d.d.IsPersistent()
	return ok, wrap(err, "ask whether %s is persistent on %s", d.name, d.conn.uri)
}

// XML is the domain's persistent definition (Config) or its live one
// (Live; for a stopped domain libvirt gives the persistent one).
func (d *Domain) XML(which Affect) ([]byte, error) {
	var flags libvirt.DomainXMLFlags
	if which == Config {
		flags = libvirt.DOMAIN_XML_INACTIVE
	}
	x, err := d.d.GetXMLDesc(flags)
	if err != nil {
		return nil, wrap(err, "read the %s XML of %s on %s", which, d.name, d.conn.uri)
	}
	return []byte(x), nil
}

// Attach adds the hostdevs of vs to the definitions affect names, all or
// none: a failure detaches the ones already attached.
func (d *Domain) Attach(vs []domxml.VGPU, affect Affect) error {
	for i, v := range vs {
		x, err := domxml.HostdevXML(v)
		if err != nil {
			return err
		}
		err = d.d.AttachDeviceFlags(x, affect.deviceFlags())
		if errors.Is(err, libvirt.ERR_NO_SUPPORT) && affect == Config && i == 0 {
			// Drivers without device attach (libvirt's test driver before
			// 10.x) still take a new definition: the change virsh edit makes.
			return d.editConfig(fmt.Sprintf("attach %d hostdevs to", len(vs)), func(doc []byte) ([]byte, error) {
				return domxml.AddHostdevs(doc, vs)
			})
		}
		if err != nil {
			err = wrap(err, "attach the hostdev of %s to %s (%s) on %s", v, d.name, affect, d.conn.uri)
			if undo := d.Detach(vs[:i], affect); undo != nil {
				return fmt.Errorf("%w; undoing the earlier hostdevs failed too: %w", err, undo)
			}
			return err
		}
	}
	return nil
}

// Detach removes the hostdevs of vs from the definitions affect names. A
// hostdev already gone is not an error, so a detach can be repeated.
//
// A live detach of a PCI device needs the guest's consent: libvirt returns
// once the guest was asked, and QEMU may hold the device a little longer.
func (d *Domain) Detach(vs []domxml.VGPU, affect Affect) error {
	for i, v := range vs {
		x, err := domxml.HostdevXML(v)
		if err != nil {
			return err
		}
		err = d.d.DetachDeviceFlags(x, affect.deviceFlags())
		switch {
		case errors.Is(err, libvirt.ERR_NO_SUPPORT) && affect == Config && i == 0:
			return d.editConfig(fmt.Sprintf("detach %d hostdevs from", len(vs)), func(doc []byte) ([]byte, error) {
				return domxml.RemoveHostdevs(doc, vs)
			})
		case errors.Is(err, libvirt.ERR_DEVICE_MISSING):
		case err != nil:
			return wrap(err, "detach the hostdev of %s from %s (%s) on %s", v, d.name, affect, d.conn.uri)
		}
	}
	return nil
}

// SetRequest writes our metadata element to the definitions affect names;
// nil removes it.
func (d *Domain) SetRequest(r *domxml.Request, affect Affect) error {
	x := ""
	what := "remove the vgpu request of"
	if r != nil {
		if err := r.Validate(); err != nil {
			return err
		}
		x = r.SetMetadataXML()
		what = fmt.Sprintf("record the request for %d x %s in", r.Count, r.Profile)
	}
	err := d.d.SetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, x, domxml.Prefix, domxml.Namespace, affect.impact())
	return wrap(err, "%s %s (%s) on %s", what, d.name, affect, d.conn.uri)
}

// SetMigration writes into the persistent definition how QEMU migrates the
// request's vGPUs (domxml.SetMigration: user aliases and a <qemu:override>
// per vGPU with props; nil props drop vgpu's overrides). QEMU reads it at
// the next start.
func (d *Domain) SetMigration(r *domxml.Request, props []libvirtxml.DomainQEMUOverrideProperty) error {
	return d.editConfig("set how the vGPUs migrate in", func(doc []byte) ([]byte, error) {
		return domxml.SetMigration(doc, r, props)
	})
}

// editConfig replaces the persistent definition with edit's version of it.
// SECURE: the definition written back must keep its secrets (VNC passwords).
func (d *Domain) editConfig(what string, edit func([]byte) ([]byte, error)) error {
	action := fmt.Sprintf("%s the config of %s on %s", what, d.name, d.conn.uri)
	persistent, err := d.Persistent()
	if err != nil {
		return err
	}
	if !persistent {
		return &Error{Action: action, Detail: "the domain is transient: it has no config", Kind: ErrInvalidState,
			Err: errors.New("transient domain")}
	}
	x, err := d.d.GetXMLDesc(libvirt.DOMAIN_XML_INACTIVE | libvirt.DOMAIN_XML_SECURE)
	if err != nil {
		return wrap(err, "%s", action)
	}
	out, err := edit([]byte(x))
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	nd, err := d.conn.c.DomainDefineXML(string(out))
	if err != nil {
		return wrap(err, "%s", action)
	}
	return wrap(nd.Free(), "%s", action)
}

// Start boots a defined domain (virsh start).
func (d *Domain) Start() error {
	return wrap(d.d.Create(), "start %s on %s", d.name, d.conn.uri)
}
