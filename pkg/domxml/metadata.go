package domxml

import (
	"fmt"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// ReadRequest finds our request in d's metadata; ok is false when d has
// none.
func ReadRequest(d *libvirtxml.Domain) (r Request, ok bool, err error) {
	if d.Metadata == nil {
		return Request{}, false, nil
	}
	inner := []byte(d.Metadata.XML)
	els, i, err := findRequest(inner)
	if err != nil || i < 0 {
		return Request{}, false, err
	}
	r, err = ParseRequest(inner[els[i].start:els[i].end])
	return r, err == nil, err
}

// WriteRequest puts r in d's metadata in place of ours, keeping every other
// application's element as written; a nil r removes ours.
func WriteRequest(d *libvirtxml.Domain, r *Request) error {
	if r != nil {
		if err := r.Validate(); err != nil {
			return err
		}
	}
	var inner []byte
	if d.Metadata != nil {
		inner = []byte(d.Metadata.XML)
	}
	els, i, err := findRequest(inner)
	if err != nil {
		return err
	}
	var out string
	switch {
	case i >= 0:
		e := els[i]
		if r == nil {
			out = string(apply(inner, []splice{{lineStart(inner, e.start), e.end, ""}}))
		} else {
			out = string(apply(inner, []splice{{e.start, e.end, r.render(Prefix+":", lineIndent(inner, e.start))}}))
		}
	case r != nil:
		// After the last element, before the whitespace that closes the
		// content, indented like its siblings.
		body := strings.TrimRight(string(inner), " \t\r\n")
		tail := string(inner[len(body):])
		indent := ""
		for _, e := range els {
			if e.depth == 0 {
				indent = lineIndent(inner, e.start)
			}
		}
		if body == "" {
			out = r.XML()
		} else {
			out = body + "\n" + indent + r.render(Prefix+":", indent) + tail
		}
	default:
		return nil
	}
	if strings.TrimSpace(out) == "" {
		d.Metadata = nil
		return nil
	}
	d.Metadata = &libvirtxml.DomainMetadata{XML: out}
	return nil
}

// findRequest scans a metadata element's content and finds our request
// element among its top-level elements; i is -1 when absent.
func findRequest(inner []byte) (els []element, i int, err error) {
	els, err = scan(inner, 0)
	if err != nil {
		return nil, -1, fmt.Errorf("read domain metadata: %w", err)
	}
	found := -1
	for i, e := range els {
		if e.depth == 0 && e.name.Space == Namespace && e.name.Local == "request" {
			if found >= 0 {
				return nil, -1, fmt.Errorf("%w: the domain metadata has two vgpu request elements", ErrInvalid)
			}
			found = i
		}
	}
	return els, found, nil
}
