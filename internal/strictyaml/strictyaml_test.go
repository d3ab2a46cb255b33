package strictyaml

import (
	"errors"
	"strings"
	"testing"
)

var errKind = errors.New("invalid test file")

// walk decodes data as a mapping of a (a value) and b (a list of ints).
func walk(data string) error {
	w := New("t.yaml", errKind)
	root := w.Document([]byte(data), "a mapping of a, b")
	if root == nil {
		return w.Err()
	}
	m := w.Mapping(root, "", []string{"a", "b"})
	if m == nil {
		return w.Err()
	}
	if n := w.Require(root, m, "", "a", "a value"); n != nil {
		w.Scalar(n, "a", "a value")
	}
	if n := m["b"]; n != nil {
		for i, item := range w.List(n, "b", "a list of numbers") {
			w.Int(item, "b["+string(rune('0'+i))+"]", "a whole number")
		}
	}
	return w.Err()
}

func TestWalkerRules(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       []string // each must appear, in this order
	}{
		{"ok", "a: x\nb: [1, 2]\n", nil},
		{"empty", "", []string{"t.yaml: the file is empty; allowed: a mapping of a, b"}},
		{"two documents", "a: x\n---\na: y\n", []string{"t.yaml:2: a second YAML document"}},
		{"syntax", "a: [\n", []string{"t.yaml:", "invalid YAML"}},
		{"not a mapping", "- 1\n", []string{"t.yaml:1: the file is a list, not a mapping; allowed: a mapping of a, b"}},
		{"unknown", "a: x\nc: 1\n", []string{"t.yaml:2: c: unknown field; allowed: a, b"}},
		{"duplicate", "a: x\na: y\n", []string{"t.yaml:2: a: is given twice (first on line 1)"}},
		{"missing", "b: [1]\n", []string{"t.yaml:1: a: missing; allowed: a value"}},
		{"alias", "a: &x y\nb: *x\n", []string{"t.yaml:2: b: is an alias (*x)"}},
		{"merge key", "a: x\n<<: {b: [1]}\n", []string{"t.yaml:2: has a merge key (<<)"}},
		{"tag", "a: !secret x\n", []string{"t.yaml:1: a: has the tag !secret; allowed: untagged values"}},
		{"not a number", "a: x\nb: [1, two]\n", []string{`t.yaml:2: b[1]: two is not a whole number`}},
		{"empty value", "a:\n", []string{"t.yaml:1: a: is empty"}},
		{"odd characters quoted", "a: x\n\"c d\": 1\n", []string{`"c d": unknown field`}},
		{"every problem in line order", "c: 1\nb: x\na: [1]\n", []string{"t.yaml:1: c: unknown", "t.yaml:2: b: is the value x, not a list", "t.yaml:3: a: is a list, not a value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := walk(tc.data)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, errKind) {
				t.Errorf("error does not match its kind: %v", err)
			}
			msg := err.Error()
			at := 0
			for _, w := range tc.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("error %q lacks %q (after position %d)", msg, w, at)
				}
				at += i + len(w)
			}
		})
	}
}

func TestFieldErrorUnwrap(t *testing.T) {
	cause := errors.New("cause")
	fe := &FieldError{File: "f", Line: 3, Field: "x", Problem: "bad", Allowed: "good", Kind: errKind, Err: cause}
	if fe.Error() != "f:3: x: bad; allowed: good" || !errors.Is(fe, errKind) || !errors.Is(fe, cause) {
		t.Fatalf("%q", fe.Error())
	}
	if LineOf(fe) != 3 || LineOf(cause) != 0 {
		t.Fatal("LineOf")
	}
}
