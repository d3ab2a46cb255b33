package profile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-project/vgpu/pkg/inventory"
)

// Keys of each mapping, in the order messages list them.
func fileKeys() []string {
	return []string{"version", "model", "match", "dialect", "framebuffer-mb", "profiles"}
}
func matchKeys() []string { return []string{"vendor", "devices"} }
func specKeys() []string  { return []string{"name", "split", "mdev-type", "nvidia-type", "description"} }
func typeKeys() []string  { return []string{"id", "name"} }

// Decode reads one catalog file strictly: every unknown field, missing
// field, wrong type and bad value is reported (all of them, joined) with
// the file, the line, the field's path and what is allowed. file only names
// the data in messages.
func Decode(file string, data []byte) (*File, error) {
	d := &decoder{file: file, lines: map[string]int{}, broken: map[string]bool{}}
	f := d.decode(data)
	if f == nil {
		return nil, errors.Join(d.errs...)
	}
	f.Path, f.lines = file, d.lines
	errs := append(d.errs, f.check(d.broken)...)
	if len(errs) > 0 {
		// In file order, as an editor would walk them.
		slices.SortStableFunc(errs, func(a, b error) int { return lineOf(a) - lineOf(b) })
		return nil, errors.Join(errs...)
	}
	return f, nil
}

func lineOf(err error) int {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Line
	}
	return 0
}

// decoder walks the YAML node tree itself rather than unmarshalling into
// structs: that is what gives every error its field path and line, and lets
// it report all problems at once. It is stricter than KnownFields(true):
// unknown keys, duplicate keys, aliases and custom tags are all refused.
type decoder struct {
	file  string
	errs  []error
	lines map[string]int
	// broken marks fields already reported, so check does not report
	// them (or anything under them) a second time.
	broken map[string]bool
}

func (d *decoder) fail(line int, field, problem, allowed string) {
	d.errs = append(d.errs, &FieldError{File: d.file, Line: line, Field: field, Problem: problem, Allowed: allowed})
	if field != "" {
		d.broken[field] = true
	}
}

func (d *decoder) decode(data []byte) *File {
	root, ok := d.document(data)
	if !ok {
		return nil
	}
	f := &File{}
	m := d.mapping(root, "", fileKeys())
	if m == nil {
		return nil
	}
	if n := d.require(root, m, "", "version", Version); n != nil {
		f.Version, _ = d.scalar(n, "version", Version)
	}
	if n := d.require(root, m, "", "model", "the GPU model's name, e.g. NVIDIA Tesla T4"); n != nil {
		f.Model.Name, _ = d.scalar(n, "model", "the GPU model's name")
	}
	if n := d.require(root, m, "", "match", "a mapping of "+strings.Join(matchKeys(), ", ")); n != nil {
		d.match(n, &f.Model)
	}
	if n := d.require(root, m, "", "dialect", dialectList()); n != nil {
		s, _ := d.scalar(n, "dialect", dialectList())
		f.Model.Dialect = inventory.Dialect(s)
	}
	if n := m["framebuffer-mb"]; n != nil {
		const allowed = "the GPU's memory in MiB, e.g. 16384; leave it out when the GPU has none of its own"
		if v, ok := d.int(n, "framebuffer-mb", allowed); ok {
			if v <= 0 {
				d.fail(n.Line, "framebuffer-mb", fmt.Sprintf("%d is not a size", v), allowed)
			} else {
				f.Model.FramebufferMB = uint64(v)
			}
		}
	}
	if n := d.require(root, m, "", "profiles", "a list of one or more profiles"); n != nil {
		for i, item := range d.list(n, "profiles", "a list of one or more profiles") {
			f.Profiles = append(f.Profiles, d.spec(item, fmt.Sprintf("profiles[%d]", i), f.Model.Dialect))
		}
	}
	return f
}

// document parses data and returns its single document's root node.
func (d *decoder) document(data []byte) (root *yaml.Node, ok bool) {
	// The parser is third-party code fed untrusted files: a panic in it
	// becomes an error on this file, not a crashed daemon.
	defer func() {
		if r := recover(); r != nil {
			d.fail(0, "", fmt.Sprintf("the YAML parser failed: %v", r), "")
			root, ok = nil, false
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	// A no-op for yaml.Node targets; kept so the intent is plain. The
	// walker below does the strict field checking.
	dec.KnownFields(true)
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.fail(0, "", "the file is empty", "a mapping starting with version: "+Version)
		} else {
			d.syntax(err)
		}
		return nil, false
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.syntax(err)
		return nil, false
	default:
		d.fail(extra.Line, "", "a second YAML document", "one document per file")
		return nil, false
	}
	if len(doc.Content) != 1 || (doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].ShortTag() == "!!null") {
		d.fail(doc.Line, "", "the file is empty", "a mapping starting with version: "+Version)
		return nil, false
	}
	return doc.Content[0], true
}

// syntax reports a YAML syntax error, lifting yaml's "line N" into Line.
func (d *decoder) syntax(err error) {
	fe := &FieldError{File: d.file, Err: err}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, problem, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(n); err == nil {
				fe.Line, msg = line, problem
			}
		}
	}
	fe.Problem = "invalid YAML: " + strings.Join(strings.Fields(msg), " ")
	d.errs = append(d.errs, fe)
}

// mapping returns n's fields by key, refusing unknown and duplicate keys.
func (d *decoder) mapping(n *yaml.Node, path string, keys []string) map[string]*yaml.Node {
	allowed := strings.Join(keys, ", ")
	if !d.plain(n, path) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		what := "is"
		if path == "" {
			what = "the file is"
		}
		d.fail(n.Line, path, fmt.Sprintf("%s %s, not a mapping", what, kindOf(n)), "a mapping of "+allowed)
		return nil
	}
	m := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" || k.ShortTag() == "!!null" {
			problem := fmt.Sprintf("has a key that is %s", kindOf(k))
			if k.ShortTag() == "!!merge" {
				problem = "has a merge key (<<)"
			}
			// Not marked broken: the fields around it are still checked.
			d.errs = append(d.errs, &FieldError{File: d.file, Line: k.Line, Field: path, Problem: problem, Allowed: allowed})
			continue
		}
		field := join(path, quote(k.Value))
		switch {
		case !slices.Contains(keys, k.Value):
			d.fail(k.Line, field, "unknown field", allowed)
		case m[k.Value] != nil:
			d.fail(k.Line, field, fmt.Sprintf("is given twice (first on line %d)", d.lines[field]), "each field once")
		default:
			m[k.Value] = v
			d.lines[field] = k.Line
		}
	}
	return m
}

// require returns m[key], reporting it missing from the mapping parent.
func (d *decoder) require(parent *yaml.Node, m map[string]*yaml.Node, path, key, allowed string) *yaml.Node {
	if n := m[key]; n != nil {
		return n
	}
	field := join(path, key)
	line, ok := d.lines[path] // the line naming the parent reads best
	if !ok {
		line = parent.Line
	}
	if !d.broken[field] { // a rejected duplicate is not also missing
		d.fail(line, field, "missing", allowed)
	}
	return nil
}

func (d *decoder) list(n *yaml.Node, path, allowed string) []*yaml.Node {
	if !d.plain(n, path) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n.Line, path, fmt.Sprintf("is %s, not a list", kindOf(n)), allowed)
		return nil
	}
	for i, item := range n.Content {
		d.lines[fmt.Sprintf("%s[%d]", path, i)] = item.Line
	}
	return n.Content
}

// plain refuses aliases and custom tags: a catalog spells everything out.
func (d *decoder) plain(n *yaml.Node, path string) bool {
	if n.Kind == yaml.AliasNode {
		d.fail(n.Line, path, "is an alias (*"+quote(n.Value)+")", "values written out; anchors and aliases are not supported")
		return false
	}
	switch n.ShortTag() {
	case "!!map", "!!seq", "!!str", "!!int", "!!float", "!!bool", "!!timestamp", "!!null":
		return true
	}
	d.fail(n.Line, path, fmt.Sprintf("has the tag %s", quote(n.Tag)), "untagged values")
	return false
}

// scalar returns n's text when it is a single value.
func (d *decoder) scalar(n *yaml.Node, path, allowed string) (string, bool) {
	if !d.plain(n, path) {
		return "", false
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(n.Line, path, fmt.Sprintf("is %s, not a value", kindOf(n)), allowed)
		return "", false
	}
	if n.ShortTag() == "!!null" {
		d.fail(n.Line, path, "is empty", allowed)
		return "", false
	}
	return n.Value, true
}

func (d *decoder) int(n *yaml.Node, path, allowed string) (int64, bool) {
	s, ok := d.scalar(n, path, allowed)
	if !ok {
		return 0, false
	}
	var v int64
	if n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		d.fail(n.Line, path, fmt.Sprintf("%s is not a whole number", quote(s)), allowed)
		return 0, false
	}
	return v, true
}

// hexID reads a PCI id. It uses the text as written, never the YAML type:
// an unquoted 1002 is an int to YAML and 1e30 a float, but both are hex here.
func (d *decoder) hexID(n *yaml.Node, path string) (uint16, bool) {
	const allowed = "4 hex digits, e.g. 10de"
	s, ok := d.scalar(n, path, allowed)
	if !ok {
		return 0, false
	}
	h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	v, err := strconv.ParseUint(h, 16, 16)
	if len(h) != 4 || err != nil {
		d.fail(n.Line, path, fmt.Sprintf("%s is not a PCI id", quote(s)), allowed)
		return 0, false
	}
	return uint16(v), true
}

func (d *decoder) match(n *yaml.Node, m *Model) {
	fields := d.mapping(n, "match", matchKeys())
	if fields == nil {
		return
	}
	if v := d.require(n, fields, "match", "vendor", "4 hex digits, e.g. 10de"); v != nil {
		m.VendorID, _ = d.hexID(v, "match.vendor")
	}
	const devAllowed = "a list of 4-hex-digit device ids, e.g. [1eb8]"
	if v := d.require(n, fields, "match", "devices", devAllowed); v != nil {
		items := d.list(v, "match.devices", devAllowed)
		if items == nil && !d.broken["match.devices"] {
			m.DeviceIDs = []uint16{} // present but empty: check says so
		}
		for i, item := range items {
			if id, ok := d.hexID(item, fmt.Sprintf("match.devices[%d]", i)); ok {
				m.DeviceIDs = append(m.DeviceIDs, id)
			} else {
				m.DeviceIDs = append(m.DeviceIDs, 0)
			}
		}
	}
}

func (d *decoder) spec(n *yaml.Node, path string, dialect inventory.Dialect) Spec {
	var s Spec
	m := d.mapping(n, path, specKeys())
	if m == nil {
		return s
	}
	if v := d.require(n, m, path, "name", nameRule); v != nil {
		s.Name, _ = d.scalar(v, path+".name", nameRule)
	}
	splits := joinInts(allowedSplits(dialect))
	if v := d.require(n, m, path, "split", splits); v != nil {
		if i, ok := d.int(v, path+".split", splits); ok {
			// Clamp so a huge number still reads as itself in the message.
			s.Split = int(max(min(i, 1<<31-1), -1<<31))
		}
	}
	if v := m["description"]; v != nil {
		s.Description, _ = d.scalar(v, path+".description", "one line of text")
	}
	if v := m["mdev-type"]; v != nil {
		p := path + ".mdev-type"
		if t := d.mapping(v, p, typeKeys()); t != nil {
			if x := d.require(v, t, p, "id", mdevIDRule); x != nil {
				s.Mdev.ID, _ = d.scalar(x, p+".id", mdevIDRule)
			}
			if x := d.require(v, t, p, "name", "the type's name attribute, e.g. GRID T4-4Q"); x != nil {
				s.Mdev.Name, _ = d.scalar(x, p+".name", "the type's name attribute")
			}
		}
	}
	if v := m["nvidia-type"]; v != nil {
		p := path + ".nvidia-type"
		if t := d.mapping(v, p, typeKeys()); t != nil {
			if x := d.require(v, t, p, "id", nvidiaIDRule); x != nil {
				if id, ok := d.int(x, p+".id", nvidiaIDRule); ok {
					s.NVIDIA.ID = int(max(min(id, 1<<31-1), -1<<31))
				}
			}
			if x := d.require(v, t, p, "name", "the type's name, e.g. NVIDIA L40S-12Q"); x != nil {
				s.NVIDIA.Name, _ = d.scalar(x, p+".name", "the type's name")
			}
		}
	}
	return s
}

func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	if n.ShortTag() == "!!null" {
		return "empty"
	}
	return "the value " + quote(n.Value)
}

// quote shows a value as written, quoting it when it is empty or has
// spaces, quotes or unprintable characters: an error stays one clear line.
func quote(s string) string {
	odd := func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '"' || r == '\'' }
	if s == "" || strings.ContainsFunc(s, odd) {
		return strconv.Quote(s)
	}
	return s
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func dialectList() string {
	ds := knownDialects()
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = string(d)
	}
	return strings.Join(s, ", ")
}
