package config

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinels callers branch on with errors.Is. Desired's errors also match
// profile.ErrUnknownProfile and profile.ErrWrongGPU where those apply.
var (
	// ErrInvalid: the file breaks the schema.
	ErrInvalid = errors.New("invalid host config")
	// ErrNoSuchGPU: an entry names an address this host does not have.
	ErrNoSuchGPU = errors.New("no such GPU on this host")
	// ErrConflict: two entries claim one GPU.
	ErrConflict = errors.New("GPU claimed by two config entries")
)

// FieldError is one problem in a config file, said so an admin can fix it:
//
//	/etc/vgpud/config.yaml:7: gpus[1].profile: unknown profile "t4-3q"; allowed: t4-16q, t4-8q, t4-4q, t4-2q, t4-1q
type FieldError struct {
	File    string
	Line    int    // 0 when unknown
	Field   string // "gpus[1].profile"; "" for the whole file
	Problem string
	Allowed string // "" when there is nothing to offer
	// Kind is the sentinel the error matches; nil means ErrInvalid.
	Kind error
	Err  error // an underlying cause (a YAML syntax error), or nil
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File == "" { // a Config built in code
		b.WriteString("host config")
	}
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
	kind := e.Kind
	if kind == nil {
		kind = ErrInvalid
	}
	if e.Err != nil {
		return []error{kind, e.Err}
	}
	return []error{kind}
}

func lineOf(err error) int {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Line
	}
	return 0
}
