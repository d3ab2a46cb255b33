package domxml

import (
	"fmt"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// index locates, in a domain XML, the elements vgpu edits.
type index struct {
	doc      []byte
	els      []element
	root     int
	uuid     int // -1 when absent, as are the next three
	metadata int
	request  int
	devices  int
	sources  []source
}

// source is the <source><address/> of one PCI or mdev hostdev.
type source struct {
	hostdev, address int // into els
	typ              string
	id               string
}

// indexDepth is the depth of the deepest element the index looks at:
// domain/devices/hostdev/source/address.
const indexDepth = 4

func newIndex(doc []byte) (*index, error) {
	els, err := scan(doc, indexDepth)
	if err != nil {
		return nil, fmt.Errorf("read domain XML: %w", err)
	}
	if len(els) == 0 || els[0].name.Local != "domain" {
		return nil, fmt.Errorf("%w: not a domain XML (no <domain> root element)", ErrInvalid)
	}
	ix := &index{doc: doc, els: els, uuid: -1, metadata: -1, request: -1, devices: -1}
	for i, e := range els {
		switch p := path(els, i); {
		case p == "domain/uuid":
			ix.uuid = i
		case p == "domain/metadata":
			ix.metadata = i
		case p == "domain/metadata/request" && e.name.Space == Namespace:
			if ix.request >= 0 {
				return nil, fmt.Errorf("%w: the domain has two vgpu request elements", ErrInvalid)
			}
			ix.request = i
		case p == "domain/devices":
			ix.devices = i
		case p == "domain/devices/hostdev/source/address":
			hd := els[els[i].parent].parent
			typ, _ := els[hd].attrValue("type")
			if mode, ok := els[hd].attrValue("mode"); ok && mode != "subsystem" {
				continue
			}
			ax := addressXML{}
			ax.Domain, _ = e.attrValue("domain")
			ax.Bus, _ = e.attrValue("bus")
			ax.Slot, _ = e.attrValue("slot")
			ax.Function, _ = e.attrValue("function")
			ax.UUID, _ = e.attrValue("uuid")
			if id, ok := ax.id(typ); ok {
				ix.sources = append(ix.sources, source{hostdev: hd, address: i, typ: typ, id: id})
			}
		}
	}
	return ix, nil
}

// childIndent guesses the indentation of el's children from el's own.
func (ix *index) childIndent(el int) string {
	return lineIndent(ix.doc, ix.els[el].start) + "  "
}

// insertChild returns the splice that makes text (written unindented)
// the last child of el, indented on its own line when el's end tag is on
// its own line.
func (ix *index) insertChild(el int, text string) splice {
	e := ix.els[el]
	indent := ix.childIndent(el)
	if e.selfClosing(ix.doc) {
		tag := ix.doc[e.start:e.tagEnd]
		open := strings.TrimRight(strings.TrimSuffix(string(tag), "/>"), " \t\r\n") + ">"
		return splice{e.start, e.end, open + "\n" + indented(text, indent) + "\n" + lineIndent(ix.doc, e.start) + "</" + tagName(tag) + ">"}
	}
	if ls := lineStart(ix.doc, e.endStart); ls < e.endStart {
		return splice{ls + 1, ls + 1, indented(text, indent) + "\n"}
	}
	return splice{e.endStart, e.endStart, text}
}

// tagName is the element name of a start tag as written.
func tagName(tag []byte) string {
	n := strings.IndexAny(string(tag[1:]), " \t\r\n/>")
	if n < 0 {
		return string(tag[1:])
	}
	return string(tag[1 : 1+n])
}

// indented prefixes every line of text with indent.
func indented(text, indent string) string {
	return indent + strings.ReplaceAll(text, "\n", "\n"+indent)
}

// remove is the splice deleting el with its line's indentation.
func (ix *index) remove(el int) splice {
	return splice{lineStart(ix.doc, ix.els[el].start), ix.els[el].end, ""}
}

// setRequest is the splice that puts r (nil: nothing) where our request
// element is or belongs.
func (ix *index) setRequest(r *Request) ([]splice, error) {
	if r != nil {
		if err := r.Validate(); err != nil {
			return nil, err
		}
	}
	switch {
	case ix.request >= 0 && r != nil:
		e := ix.els[ix.request]
		return []splice{{e.start, e.end, r.render(Prefix+":", lineIndent(ix.doc, e.start))}}, nil
	case ix.request >= 0:
		// Drop <metadata> too when ours was its only element.
		for i, e := range ix.els {
			if e.parent == ix.metadata && i != ix.request {
				return []splice{ix.remove(ix.request)}, nil
			}
		}
		return []splice{ix.remove(ix.metadata)}, nil
	case r == nil:
		return nil, nil
	case ix.metadata >= 0:
		return []splice{ix.insertChild(ix.metadata, r.XML())}, nil
	}
	// No <metadata>: libvirt writes it after name, uuid, title and description.
	after := ix.uuid
	for i, e := range ix.els {
		if e.parent == ix.root && (e.name.Local == "name" || e.name.Local == "uuid" || e.name.Local == "genid" ||
			e.name.Local == "title" || e.name.Local == "description") {
			after = max(after, i)
		}
	}
	md := "<metadata>\n" + indented(r.XML(), "  ") + "\n</metadata>"
	if after < 0 {
		return []splice{ix.insertChild(ix.root, md)}, nil
	}
	at := ix.els[after].end
	return []splice{{at, at, "\n" + indented(md, lineIndent(ix.doc, ix.els[after].start))}}, nil
}

// SetRequest puts r in the domain XML doc's metadata in place of ours,
// creating <metadata> when needed; a nil r removes ours. Nothing else in
// doc changes.
func SetRequest(doc []byte, r *Request) ([]byte, error) {
	ix, err := newIndex(doc)
	if err != nil {
		return nil, err
	}
	ss, err := ix.setRequest(r)
	if err != nil {
		return nil, err
	}
	return apply(doc, ss), nil
}

// AddHostdevs appends the hostdevs of vs to the domain XML doc's devices.
// A vGPU some hostdev already carries is an error: libvirt refuses a
// device twice, and so does vgpu, before anything changes.
func AddHostdevs(doc []byte, vs []VGPU) ([]byte, error) {
	ix, err := newIndex(doc)
	if err != nil {
		return nil, err
	}
	var text []string
	for _, v := range vs {
		for _, s := range ix.sources {
			if s.id == v.ID() && s.typ == hostdevType(v) {
				return nil, fmt.Errorf("add the hostdev of %s: the domain has one already", v)
			}
		}
		x, err := HostdevXML(v)
		if err != nil {
			return nil, err
		}
		text = append(text, x)
	}
	if len(text) == 0 {
		return doc, nil
	}
	if ix.devices < 0 {
		return apply(doc, []splice{ix.insertChild(ix.root, "<devices>\n"+indented(strings.Join(text, "\n"), "  ")+"\n</devices>")}), nil
	}
	return apply(doc, []splice{ix.insertChild(ix.devices, strings.Join(text, "\n"))}), nil
}

// RemoveHostdevs removes from the domain XML doc the hostdevs carrying vs;
// a vGPU no hostdev carries is skipped, so removing twice is harmless.
func RemoveHostdevs(doc []byte, vs []VGPU) ([]byte, error) {
	ix, err := newIndex(doc)
	if err != nil {
		return nil, err
	}
	var ss []splice
	for _, s := range ix.sources {
		for _, v := range vs {
			if s.id == v.ID() && s.typ == hostdevType(v) {
				ss = append(ss, ix.remove(s.hostdev))
			}
		}
	}
	return apply(doc, ss), nil
}

// Rewrite is the domain XML a migration or restore starts the domain
// with on this host: each hostdev source and metadata entry naming a key of
// moves (a vGPU id of the source host) is pointed at the key's vGPU on this
// host, which keeps the index. Nothing else in doc changes, byte for byte.
// A move must keep the vGPU's shape (PCI to PCI, mdev to mdev) and name a
// vGPU of the request that some hostdev carries.
func Rewrite(doc []byte, moves map[string]VGPU) ([]byte, error) {
	d, err := Parse(doc)
	if err != nil {
		return nil, err
	}
	if len(moves) == 0 {
		return doc, nil
	}
	if d.Request == nil {
		return nil, fmt.Errorf("%w: rewrite domain %s: it has no vgpu request", ErrInvalid, d.Name)
	}
	ix, err := newIndex(doc)
	if err != nil {
		return nil, err
	}
	req := Request{Profile: d.Request.Profile, Count: d.Request.Count}
	var ss []splice
	changed := false
	for _, old := range d.Request.VGPUs {
		nv, ok := moves[old.ID()]
		if !ok {
			req.VGPUs = append(req.VGPUs, old)
			continue
		}
		if !sameShape(old, nv) {
			return nil, fmt.Errorf("%w: rewrite domain %s: cannot move %s to %s: a hostdev cannot change between PCI and mdev", ErrInvalid, d.Name, old, nv)
		}
		nv.Index = old.Index
		req.VGPUs = append(req.VGPUs, nv)
		carried := 0
		for _, s := range ix.sources {
			if s.id != old.ID() || s.typ != hostdevType(old) {
				continue
			}
			carried++
			if nv == old {
				continue
			}
			changed = true
			e := ix.els[s.address]
			ss = append(ss, splice{e.start, e.tagEnd, setAttrs(doc, e, sourceAttrs(nv))})
		}
		if carried == 0 {
			return nil, fmt.Errorf("%w: rewrite domain %s: no hostdev carries vGPU %s", ErrInvalid, d.Name, old.ID())
		}
		changed = changed || nv != old
	}
	for id := range moves {
		if !d.Request.Has(id) {
			return nil, fmt.Errorf("%w: rewrite domain %s: vGPU %s is not one of its vGPUs", ErrInvalid, d.Name, id)
		}
	}
	if !changed {
		return doc, nil
	}
	rs, err := ix.setRequest(&req)
	if err != nil {
		return nil, fmt.Errorf("rewrite domain %s: %w", d.Name, err)
	}
	return apply(doc, append(ss, rs...)), nil
}

// sourceAttrs are the attributes of a hostdev's source address for v, in
// libvirt's notation.
func sourceAttrs(v VGPU) [][2]string {
	if v.Kind == vgpu.KindMdev {
		return [][2]string{{"uuid", v.UUID}}
	}
	a := v.Address
	return [][2]string{
		{"domain", fmt.Sprintf("0x%04x", a.Domain)},
		{"bus", fmt.Sprintf("0x%02x", a.Bus)},
		{"slot", fmt.Sprintf("0x%02x", a.Device)},
		{"function", fmt.Sprintf("0x%x", a.Function)},
	}
}
