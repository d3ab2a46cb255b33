package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

// Keys of each mapping, in the order messages list them.
func topKeys() []string      { return []string{"version", "gpus", "socket", "onRelease", "metrics"} }
func entryKeys() []string    { return []string{"address", "id", "all", "profile"} }
func selectorKeys() []string { return []string{"address", "id", "all"} }

// What each value may be, for messages.
const (
	entriesRule = "a list of entries, each with one of address, id, all and a profile"
	oneSelector = "exactly one of address, id, all"
	idRule      = "vendor:device in hex as lspci -n prints it, e.g. 10de:1eb8"
	profileRule = "a profile name from the catalog (vgpuctl profiles), e.g. mi25-4g"
	groupRule   = "a group name, e.g. libvirt, or a numeric gid"
	listenRule  = `host:port, e.g. 127.0.0.1:9470 or :9470; "" serves no metrics`
)

// groupName is what useradd and groupadd accept, a little widened
// (upper case, dots) as distributions do.
var groupName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$`)

// Parse decodes a config strictly: unknown and duplicate fields, wrong
// types, bad values, entries that select nothing or two ways, and the same
// GPU selected twice the same way are all reported (joined, in file order)
// with the file, line, field path and what is allowed. name only labels
// the data in messages.
func Parse(name string, data []byte) (*Config, error) {
	d := &decoder{file: name, lines: map[string]int{}}
	c := d.decode(data)
	if len(d.errs) > 0 {
		slices.SortStableFunc(d.errs, func(a, b error) int { return lineOf(a) - lineOf(b) })
		return nil, errors.Join(d.errs...)
	}
	c.Path, c.lines = name, d.lines
	return c, nil
}

// decoder walks the YAML node tree rather than unmarshalling into structs:
// that is what gives every error its field path and line and reports all of
// them at once. It is stricter than KnownFields(true), which it also sets:
// duplicate keys, aliases and custom tags are refused too.
type decoder struct {
	file  string
	errs  []error
	lines map[string]int
}

func (d *decoder) fail(line int, field, problem, allowed string) {
	d.errs = append(d.errs, &FieldError{File: d.file, Line: line, Field: field, Problem: problem, Allowed: allowed})
}

func (d *decoder) decode(data []byte) *Config {
	root := d.document(data)
	if root == nil {
		return nil
	}
	m := d.mapping(root, "", topKeys())
	if m == nil {
		return nil
	}
	c := Default()
	if n := m["version"]; n == nil {
		d.fail(root.Line, "version", "missing", Version)
	} else if s, ok := d.scalar(n, "version", Version); ok && s != Version {
		d.fail(n.Line, "version", fmt.Sprintf("%s is not a version this vgpud reads", quote(s)), Version)
	}
	if n := m["gpus"]; n != nil {
		items := d.list(n, "gpus", entriesRule)
		if n.Kind == yaml.SequenceNode && len(items) == 0 {
			d.fail(n.Line, "gpus", "is an empty list", entriesRule+"; leave gpus out to manage no GPU")
		}
		for i, item := range items {
			c.GPUs = append(c.GPUs, d.entry(item, fmt.Sprintf("gpus[%d]", i)))
		}
		d.repeats(c.GPUs)
	}
	if n := m["socket"]; n != nil {
		if s := d.mapping(n, "socket", []string{"group"}); s != nil && s["group"] != nil {
			g := s["group"]
			if v, ok := d.scalar(g, "socket.group", groupRule); ok {
				if _, err := strconv.ParseUint(v, 10, 32); err != nil && !groupName.MatchString(v) {
					d.fail(g.Line, "socket.group", fmt.Sprintf("%s is not a group name", quote(v)), groupRule)
				}
				c.Socket.Group = v
			}
		}
	}
	if n := m["onRelease"]; n != nil {
		allowed := strings.Join(releasePolicies(), ", ")
		if v, ok := d.scalar(n, "onRelease", allowed); ok {
			if !slices.Contains(releasePolicies(), v) {
				d.fail(n.Line, "onRelease", fmt.Sprintf("%s is not a release policy", quote(v)), allowed)
			}
			c.OnRelease = ReleasePolicy(v)
		}
	}
	if n := m["metrics"]; n != nil {
		if s := d.mapping(n, "metrics", []string{"listen"}); s != nil && s["listen"] != nil {
			l := s["listen"]
			if v, ok := d.scalar(l, "metrics.listen", listenRule); ok {
				if why := checkListen(v); why != "" {
					d.fail(l.Line, "metrics.listen", fmt.Sprintf("%s %s", quote(v), why), listenRule)
				}
				c.Metrics.Listen = v
			}
		}
	}
	return c
}

// checkListen says what is wrong with a listen address, or "".
func checkListen(s string) string {
	if s == "" {
		return ""
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return "is not host:port"
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "has no port number from 0 to 65535"
	}
	return ""
}

func (d *decoder) entry(n *yaml.Node, path string) Entry {
	var e Entry
	m := d.mapping(n, path, entryKeys())
	if m == nil {
		return e
	}
	var given []string
	for _, k := range selectorKeys() {
		if m[k] != nil {
			given = append(given, k)
		}
	}
	switch len(given) {
	case 0:
		d.fail(n.Line, path, "selects no GPU", oneSelector)
	case 1:
	default:
		d.fail(d.lines[path+"."+given[1]], path, fmt.Sprintf("gives both %s and %s", given[0], given[1]), oneSelector)
	}
	if v := m["address"]; v != nil {
		if s, ok := d.scalar(v, path+".address", "a PCI address, e.g. 0000:03:00.0"); ok {
			a, err := pci.ParseAddress(s)
			if err != nil {
				d.errs = append(d.errs, &FieldError{File: d.file, Line: v.Line, Field: path + ".address", Problem: err.Error()})
			}
			e.Address = a
		}
	}
	if v := m["id"]; v != nil {
		if s, ok := d.scalar(v, path+".id", idRule); ok {
			id, err := ParsePCIID(s)
			if err != nil {
				d.fail(v.Line, path+".id", fmt.Sprintf("%s is not a PCI id", quote(s)), idRule)
			}
			e.ID = id
		}
	}
	if v := m["all"]; v != nil {
		const allowed = "true (or remove the entry)"
		if s, ok := d.scalar(v, path+".all", allowed); ok {
			switch {
			case v.ShortTag() != "!!bool":
				d.fail(v.Line, path+".all", fmt.Sprintf("%s is not true or false", quote(s)), allowed)
			case v.Decode(&e.All) == nil && !e.All:
				d.fail(v.Line, path+".all", "false selects no GPU", allowed)
			}
		}
	}
	if v := m["profile"]; v == nil {
		d.fail(n.Line, path+".profile", "missing", profileRule)
	} else {
		e.Profile, _ = d.scalar(v, path+".profile", profileRule)
	}
	return e
}

// repeats reports an entry selecting what an earlier one does, the same
// way. Overlaps between ways (an address and an id matching it) need the
// host's GPUs and the catalog: Desired finds those.
func (d *decoder) repeats(entries []Entry) {
	first := map[string]int{}
	for i, e := range entries {
		var key, field string
		switch {
		case !e.Address.IsZero():
			key, field = "address "+e.Address.String(), "address"
		case !e.ID.IsZero():
			key, field = "id "+e.ID.String(), "id"
		case e.All:
			key, field = "all "+e.Profile, "all"
		default:
			continue
		}
		path := fmt.Sprintf("gpus[%d].%s", i, field)
		if j, ok := first[key]; ok {
			d.fail(d.lines[path], path, fmt.Sprintf("selects what gpus[%d] (line %d) selects", j, d.lines[fmt.Sprintf("gpus[%d]", j)]),
				"one entry per GPU")
			continue
		}
		first[key] = i
	}
}

// document parses data and returns its single document's root node.
func (d *decoder) document(data []byte) (root *yaml.Node) {
	// The parser is third-party code fed a file: a panic in it becomes an
	// error on the file, not a crashed daemon.
	defer func() {
		if r := recover(); r != nil {
			d.fail(0, "", fmt.Sprintf("the YAML parser failed: %v", r), "")
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.fail(0, "", "the file is empty", "a mapping starting with version: "+Version)
		} else {
			d.syntax(err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.syntax(err)
		return nil
	default:
		d.fail(extra.Line, "", "a second YAML document", "one document per file")
		return nil
	}
	if len(doc.Content) != 1 || doc.Content[0].ShortTag() == "!!null" {
		d.fail(doc.Line, "", "the file is empty", "a mapping starting with version: "+Version)
		return nil
	}
	return doc.Content[0]
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
	fe.Problem = "invalid YAML: " + msg
	d.errs = append(d.errs, fe)
}

// mapping returns n's fields by key, refusing unknown and duplicate keys.
func (d *decoder) mapping(n *yaml.Node, path string, keys []string) map[string]*yaml.Node {
	allowed := "a mapping of " + strings.Join(keys, ", ")
	if !d.plain(n, path) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n.Line, path, fmt.Sprintf("is %s, not a mapping", kindOf(n)), allowed)
		return nil
	}
	m := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" || k.ShortTag() == "!!null" {
			d.fail(k.Line, path, "has a key that is "+kindOf(k), allowed)
			continue
		}
		field := join(path, k.Value)
		switch {
		case !slices.Contains(keys, k.Value):
			d.fail(k.Line, field, "unknown field", strings.Join(keys, ", "))
		case m[k.Value] != nil:
			d.fail(k.Line, field, fmt.Sprintf("is given twice (first on line %d)", d.lines[field]), "each field once")
		default:
			m[k.Value] = v
			d.lines[field] = k.Line
		}
	}
	return m
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

// plain refuses aliases and custom tags: a host config spells values out.
func (d *decoder) plain(n *yaml.Node, path string) bool {
	if n.Kind == yaml.AliasNode {
		d.fail(n.Line, path, "is an alias (*"+n.Value+")", "values written out; anchors and aliases are not supported")
		return false
	}
	switch n.ShortTag() {
	case "!!map", "!!seq", "!!str", "!!int", "!!float", "!!bool", "!!null":
		return true
	}
	d.fail(n.Line, path, "has the tag "+n.Tag, "untagged values")
	return false
}

// scalar returns n's text as written when it is a single, non-empty value.
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

// quote shows a value as written, quoting it only when that helps.
func quote(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"'") {
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
