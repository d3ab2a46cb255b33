package strictyaml

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
)

// FieldError is one problem in a file, said so an admin can fix it: the
// file, the line, the field's path, what is wrong and what is allowed.
//
//	profiles/mi25.yaml:14: profiles[2].split: 17 is not allowed; allowed: 1 to 16
type FieldError struct {
	File    string
	Line    int    // 0 when unknown
	Field   string // "profiles[2].split"; "" for the whole file
	Problem string // "3 is not allowed"
	Allowed string // "1, 2, 4, 8, 16"; "" when there is nothing to offer
	// Kind is the sentinel the error matches (each package's ErrInvalid, or
	// a more specific one).
	Kind error
	Err  error // the underlying cause (a YAML syntax error), or nil
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Problem)
	if e.Allowed != "" {
		b.WriteString("; allowed: " + e.Allowed)
	}
	return b.String()
}

// Unwrap lets errors.Is find the sentinel and the cause.
func (e *FieldError) Unwrap() []error {
	var out []error
	if e.Kind != nil {
		out = append(out, e.Kind)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// LineOf is the line an error points at, 0 when it is not a FieldError.
func LineOf(err error) int {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Line
	}
	return 0
}

// Walker collects the errors of one file while a decoder walks it.
type Walker struct {
	File string
	Kind error // set on every FieldError the walker makes
	Errs []error
	// Lines maps field paths ("gpus[1].profile") to the line of their key.
	Lines map[string]int
	// Broken marks fields already reported, so later checks do not report
	// them (or anything under them) a second time.
	Broken map[string]bool
}

// New starts a walk of file; kind is the sentinel its errors match.
func New(file string, kind error) *Walker {
	return &Walker{File: file, Kind: kind, Lines: map[string]int{}, Broken: map[string]bool{}}
}

// Fail records a problem with field (and marks it broken).
func (w *Walker) Fail(line int, field, problem, allowed string) {
	w.Errs = append(w.Errs, &FieldError{File: w.File, Line: line, Field: field, Problem: problem, Allowed: allowed, Kind: w.Kind})
	if field != "" {
		w.Broken[field] = true
	}
}

// Err joins the errors in file order, as an editor would walk them; nil
// when there are none.
func (w *Walker) Err() error {
	slices.SortStableFunc(w.Errs, func(a, b error) int { return LineOf(a) - LineOf(b) })
	return errors.Join(w.Errs...)
}

// Document parses data and returns its single document's root node, or
// nil after recording why not. start says what a file should begin with.
func (w *Walker) Document(data []byte, start string) (root *yaml.Node) {
	// The parser is third-party code fed untrusted files: a panic in it
	// becomes an error on this file, not a crashed daemon.
	defer func() {
		if r := recover(); r != nil {
			w.Fail(0, "", fmt.Sprintf("the YAML parser failed: %v", r), "")
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			w.Fail(0, "", "the file is empty", start)
		} else {
			w.Syntax(err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		w.Syntax(err)
		return nil
	default:
		w.Fail(extra.Line, "", "a second YAML document", "one document per file")
		return nil
	}
	if len(doc.Content) != 1 || (doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].ShortTag() == "!!null") {
		w.Fail(doc.Line, "", "the file is empty", start)
		return nil
	}
	return doc.Content[0]
}

// Syntax records a YAML syntax error, lifting yaml's "line N" into Line.
func (w *Walker) Syntax(err error) {
	fe := &FieldError{File: w.File, Err: err, Kind: w.Kind}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, problem, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(n); err == nil {
				fe.Line, msg = line, problem
			}
		}
	}
	fe.Problem = "invalid YAML: " + strings.Join(strings.Fields(msg), " ")
	w.Errs = append(w.Errs, fe)
}

// Mapping returns n's fields by key, refusing unknown and duplicate keys.
func (w *Walker) Mapping(n *yaml.Node, path string, keys []string) map[string]*yaml.Node {
	allowed := strings.Join(keys, ", ")
	if !w.Plain(n, path) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		what := "is"
		if path == "" {
			what = "the file is"
		}
		w.Fail(n.Line, path, fmt.Sprintf("%s %s, not a mapping", what, KindOf(n)), "a mapping of "+allowed)
		return nil
	}
	m := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" || k.ShortTag() == "!!null" {
			problem := fmt.Sprintf("has a key that is %s", KindOf(k))
			if k.ShortTag() == "!!merge" {
				problem = "has a merge key (<<)"
			}
			// Not marked broken: the fields around it are still checked.
			w.Errs = append(w.Errs, &FieldError{File: w.File, Line: k.Line, Field: path, Problem: problem, Allowed: allowed, Kind: w.Kind})
			continue
		}
		field := Join(path, Quote(k.Value))
		switch {
		case !slices.Contains(keys, k.Value):
			w.Fail(k.Line, field, "unknown field", allowed)
		case m[k.Value] != nil:
			w.Fail(k.Line, field, fmt.Sprintf("is given twice (first on line %d)", w.Lines[field]), "each field once")
		default:
			m[k.Value] = v
			w.Lines[field] = k.Line
		}
	}
	return m
}

// Require returns m[key], reporting it missing from the mapping parent.
func (w *Walker) Require(parent *yaml.Node, m map[string]*yaml.Node, path, key, allowed string) *yaml.Node {
	if n := m[key]; n != nil {
		return n
	}
	field := Join(path, key)
	line, ok := w.Lines[path] // the line naming the parent reads best
	if !ok {
		line = parent.Line
	}
	if !w.Broken[field] { // a rejected duplicate is not also missing
		w.Fail(line, field, "missing", allowed)
	}
	return nil
}

// List returns n's items when it is a list.
func (w *Walker) List(n *yaml.Node, path, allowed string) []*yaml.Node {
	if !w.Plain(n, path) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		w.Fail(n.Line, path, fmt.Sprintf("is %s, not a list", KindOf(n)), allowed)
		return nil
	}
	for i, item := range n.Content {
		w.Lines[fmt.Sprintf("%s[%d]", path, i)] = item.Line
	}
	return n.Content
}

// Plain refuses aliases and custom tags: our files spell everything out.
func (w *Walker) Plain(n *yaml.Node, path string) bool {
	if n.Kind == yaml.AliasNode {
		w.Fail(n.Line, path, "is an alias (*"+Quote(n.Value)+")", "values written out; anchors and aliases are not supported")
		return false
	}
	switch n.ShortTag() {
	case "!!map", "!!seq", "!!str", "!!int", "!!float", "!!bool", "!!timestamp", "!!null":
		return true
	}
	w.Fail(n.Line, path, fmt.Sprintf("has the tag %s", Quote(n.Tag)), "untagged values")
	return false
}

// Scalar returns n's text as written when it is a single, non-empty value.
func (w *Walker) Scalar(n *yaml.Node, path, allowed string) (string, bool) {
	if !w.Plain(n, path) {
		return "", false
	}
	if n.Kind != yaml.ScalarNode {
		w.Fail(n.Line, path, fmt.Sprintf("is %s, not a value", KindOf(n)), allowed)
		return "", false
	}
	if n.ShortTag() == "!!null" {
		w.Fail(n.Line, path, "is empty", allowed)
		return "", false
	}
	return n.Value, true
}

// Int returns n as a whole number.
func (w *Walker) Int(n *yaml.Node, path, allowed string) (int64, bool) {
	s, ok := w.Scalar(n, path, allowed)
	if !ok {
		return 0, false
	}
	var v int64
	if n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		w.Fail(n.Line, path, fmt.Sprintf("%s is not a whole number", Quote(s)), allowed)
		return 0, false
	}
	return v, true
}

// KindOf names what a node is, for messages.
func KindOf(n *yaml.Node) string {
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
	return "the value " + Quote(n.Value)
}

// Quote shows a value as written, quoting it when it is empty or has
// spaces, quotes or unprintable characters: an error stays one clear line.
func Quote(s string) string {
	odd := func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '"' || r == '\'' }
	if s == "" || strings.ContainsFunc(s, odd) {
		return strconv.Quote(s)
	}
	return s
}

// Join appends key to a field path.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
