package domxml

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// element is one element of a document with the byte offsets of its start
// tag and of its end, so edits can splice the document instead of
// re-serialising it.
type element struct {
	name   xml.Name // namespace resolved
	attr   []xml.Attr
	parent int // index into the element list; -1 for the root
	depth  int
	start  int // offset of '<'
	tagEnd int // offset just past the start tag's '>'
	// endStart is the offset of the end tag's '<' (tagEnd when self-closing).
	endStart int
	end      int // offset just past the end tag ('/>' included)
}

// selfClosing reports whether the element was written as <x .../>.
func (e element) selfClosing(doc []byte) bool {
	return e.tagEnd == e.end && bytes.HasSuffix(doc[e.start:e.tagEnd], []byte("/>"))
}

func (e element) attrValue(local string) (string, bool) {
	for _, a := range e.attr {
		if a.Name.Space == "" && a.Name.Local == local {
			return a.Value, true
		}
	}
	return "", false
}

// scan lists the elements of doc down to depth maxDepth (0: the root only),
// in document order. Deeper elements are read but not kept, so a document
// nested thousands deep costs time and memory in its length, not in the
// square of it: nothing vgpu edits lies deeper than a hostdev's source
// address (depth 4).
func scan(doc []byte, maxDepth int) ([]element, error) {
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var els []element
	open := []int{}           // index into els; -1 for an element not kept
	kept := func(n int) int { // nearest kept ancestor at depth n
		for i := n - 1; i >= 0; i-- {
			if open[i] >= 0 {
				return open[i]
			}
		}
		return -1
	}
	for {
		off := int(dec.InputOffset())
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if len(open) > maxDepth {
				open = append(open, -1)
				continue
			}
			els = append(els, element{name: t.Name, attr: t.Attr, parent: kept(len(open)), depth: len(open),
				start: off, tagEnd: int(dec.InputOffset())})
			open = append(open, len(els)-1)
		case xml.EndElement:
			if i := open[len(open)-1]; i >= 0 {
				e := &els[i]
				e.endStart, e.end = off, int(dec.InputOffset())
			}
			open = open[:len(open)-1]
		}
	}
	if len(open) > 0 {
		return nil, fmt.Errorf("%w: unexpected end of XML inside <%s>", ErrInvalid, els[kept(len(open))].name.Local)
	}
	return els, nil
}

// path is the local names from the root down to els[i]: "domain/devices/hostdev".
func path(els []element, i int) string {
	var parts []string
	for ; i >= 0; i = els[i].parent {
		parts = append(parts, els[i].name.Local)
	}
	slices.Reverse(parts)
	return strings.Join(parts, "/")
}

// splice is one replacement of doc[start:end].
type splice struct {
	start, end int
	with       string
}

// apply performs non-overlapping splices on a copy of doc.
func apply(doc []byte, ss []splice) []byte {
	slices.SortStableFunc(ss, func(a, b splice) int { return a.start - b.start })
	var out bytes.Buffer
	out.Grow(len(doc) + 256)
	at := 0
	for _, s := range ss {
		out.Write(doc[at:s.start])
		out.WriteString(s.with)
		at = s.end
	}
	out.Write(doc[at:])
	return out.Bytes()
}

// lineIndent is the whitespace between the start of the line holding
// offset and offset, when only whitespace precedes it on that line.
func lineIndent(doc []byte, offset int) string {
	i := offset
	for i > 0 && (doc[i-1] == ' ' || doc[i-1] == '\t') {
		i--
	}
	if i > 0 && doc[i-1] != '\n' {
		return ""
	}
	return string(doc[i:offset])
}

// lineStart extends a removal at offset back over its line's indentation
// and the newline before it, so removing an element leaves no blank line.
func lineStart(doc []byte, offset int) int {
	i := offset
	for i > 0 && (doc[i-1] == ' ' || doc[i-1] == '\t') {
		i--
	}
	if i > 0 && doc[i-1] == '\n' {
		return i - 1
	}
	return offset
}

// rawAttr is one attribute as written in a start tag.
type rawAttr struct {
	name             string // as written, a prefix included
	quote            byte
	valStart, valEnd int // the value's bytes, quotes excluded, relative to the tag
}

// rawAttrs lists the attributes of a start tag the decoder accepted.
func rawAttrs(tag []byte) []rawAttr {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
	i := 1
	for i < len(tag) && !isSpace(tag[i]) && tag[i] != '/' && tag[i] != '>' {
		i++
	}
	var out []rawAttr
	for {
		for i < len(tag) && isSpace(tag[i]) {
			i++
		}
		if i >= len(tag) || tag[i] == '/' || tag[i] == '>' {
			return out
		}
		n := i
		for i < len(tag) && !isSpace(tag[i]) && tag[i] != '=' {
			i++
		}
		a := rawAttr{name: string(tag[n:i])}
		for i < len(tag) && (isSpace(tag[i]) || tag[i] == '=') {
			i++
		}
		if i >= len(tag) {
			return out
		}
		a.quote = tag[i]
		a.valStart = i + 1
		end := bytes.IndexByte(tag[a.valStart:], a.quote)
		if end < 0 {
			return out
		}
		a.valEnd = a.valStart + end
		i = a.valEnd + 1
		out = append(out, a)
	}
}

// setAttrs returns e's start tag with the values of some attributes
// replaced and the missing ones added (in libvirt's single quotes); every
// other byte of the tag stays as written.
func setAttrs(doc []byte, e element, set [][2]string) string {
	tag := doc[e.start:e.tagEnd]
	var ss []splice
	for _, kv := range set {
		found := false
		for _, a := range rawAttrs(tag) {
			if a.name == kv[0] {
				ss = append(ss, splice{a.valStart, a.valEnd, escapeAttr(kv[1], a.quote)})
				found = true
				break
			}
		}
		if !found {
			at := len(tag) - 1 // before '>'
			if e.selfClosing(doc) {
				at--
			}
			ss = append(ss, splice{at, at, fmt.Sprintf(" %s='%s'", kv[0], escapeAttr(kv[1], '\''))})
		}
	}
	return string(apply(tag, ss))
}

// escapeAttr escapes a value for an attribute quoted with quote.
func escapeAttr(s string, quote byte) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", "'", "&apos;")
	if quote == '"' {
		r = strings.NewReplacer("&", "&amp;", "<", "&lt;", `"`, "&quot;")
	}
	return r.Replace(s)
}
