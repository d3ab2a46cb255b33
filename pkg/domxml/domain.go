package domxml

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strconv"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Domain is what vgpu needs of a domain XML.
type Domain struct {
	UUID string `json:"uuid"`
	Name string `json:"name"`
	// Request is our metadata element; nil when the domain asks for no vGPU.
	Request *Request `json:"request,omitempty"`
	// Hostdevs are the request's vGPUs that a hostdev of the domain carries,
	// in request order. Hostdevs that are not ours (an admin's own
	// passthrough) are not listed.
	Hostdevs []VGPU `json:"hostdevs,omitempty"`
}

// Missing lists the request's vGPUs that no hostdev carries.
func (d Domain) Missing() []VGPU {
	if d.Request == nil {
		return nil
	}
	var out []VGPU
	for _, v := range d.Request.VGPUs {
		found := false
		for _, h := range d.Hostdevs {
			found = found || h.ID() == v.ID()
		}
		if !found {
			out = append(out, v)
		}
	}
	return out
}

// domainXML is the cut-down domain: only what Parse needs, so anything
// else libvirt adds never breaks it.
type domainXML struct {
	XMLName  xml.Name `xml:"domain"`
	UUID     string   `xml:"uuid"`
	Name     string   `xml:"name"`
	Metadata struct {
		Requests []requestXML `xml:"https://vgpu-project.github.io/xmlns/vgpu/1.0 request"`
	} `xml:"metadata"`
	Hostdevs []hostdevXML `xml:"devices>hostdev"`
}

type hostdevXML struct {
	Mode    string      `xml:"mode,attr"`
	Type    string      `xml:"type,attr"`
	Address *addressXML `xml:"source>address"`
}

type addressXML struct {
	Domain   string `xml:"domain,attr"`
	Bus      string `xml:"bus,attr"`
	Slot     string `xml:"slot,attr"`
	Function string `xml:"function,attr"`
	UUID     string `xml:"uuid,attr"`
}

// MayHaveRequest is the hook's fast path: a document that does not mention
// our namespace has no request, and needs no parsing at all.
func MayHaveRequest(doc []byte) bool { return bytes.Contains(doc, []byte(Namespace)) }

// Parse reads a domain XML: its UUID and name, our request and the
// hostdevs carrying the request's vGPUs.
func Parse(doc []byte) (Domain, error) {
	var dx domainXML
	if err := xml.Unmarshal(doc, &dx); err != nil {
		return Domain{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	d := Domain{UUID: dx.UUID, Name: dx.Name}
	if d.UUID != "" {
		u, err := canonicalUUID(dx.UUID)
		if err != nil {
			return d, fmt.Errorf("%w: domain %s: UUID %q is not a UUID", ErrInvalid, d.Name, dx.UUID)
		}
		d.UUID = u
	}
	switch len(dx.Metadata.Requests) {
	case 0:
		return d, nil
	case 1:
	default:
		return d, fmt.Errorf("%w: domain %s has %d vgpu request elements; want one", ErrInvalid, d.Name, len(dx.Metadata.Requests))
	}
	r, err := dx.Metadata.Requests[0].request()
	if err != nil {
		return d, err
	}
	if d.UUID == "" && len(r.VGPUs) > 0 {
		return d, fmt.Errorf("%w: domain %s has vGPUs but no UUID", ErrInvalid, d.Name)
	}
	d.Request = &r
	for _, hx := range dx.Hostdevs {
		id, ok := hx.id()
		if !ok {
			continue
		}
		if v, ok := r.Find(id); ok {
			d.Hostdevs = append(d.Hostdevs, v)
		}
	}
	// In request order, whatever order the devices are in.
	var ordered []VGPU
	for _, v := range r.VGPUs {
		for _, h := range d.Hostdevs {
			if h == v {
				ordered = append(ordered, v)
				break
			}
		}
	}
	d.Hostdevs = ordered
	return d, nil
}

// id is the vGPU id a subsystem hostdev's source names, if it is a PCI or
// mdev hostdev with a readable source.
func (hx hostdevXML) id() (string, bool) {
	if hx.Address == nil || (hx.Mode != "" && hx.Mode != "subsystem") {
		return "", false
	}
	return hx.Address.id(hx.Type)
}

func (ax addressXML) id(typ string) (string, bool) {
	switch typ {
	case "pci":
		a, err := pciAddress(ax.Domain, ax.Bus, ax.Slot, ax.Function)
		return a.String(), err == nil
	case "mdev":
		u, err := canonicalUUID(ax.UUID)
		return u, err == nil
	}
	return "", false
}

// pciAddress reads libvirt's address attributes ("0x0000", or decimal);
// a missing domain is 0, as libvirt defaults it.
func pciAddress(domain, bus, slot, function string) (pci.Address, error) {
	if domain == "" {
		domain = "0"
	}
	var n [4]uint64
	for i, f := range []struct {
		s    string
		bits int
	}{{domain, 32}, {bus, 8}, {slot, 5}, {function, 3}} {
		v, err := strconv.ParseUint(f.s, 0, f.bits)
		if err != nil {
			return pci.Address{}, err
		}
		n[i] = v
	}
	return pci.Address{Domain: uint32(n[0]), Bus: uint8(n[1]), Device: uint8(n[2]), Function: uint8(n[3])}, nil
}

// hostdevType is the hostdev type attribute a vGPU needs.
func hostdevType(v VGPU) string {
	if v.Kind == vgpu.KindMdev {
		return "mdev"
	}
	return "pci"
}
