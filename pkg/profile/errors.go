package profile

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinels callers branch on with errors.Is.
var (
	// ErrInvalid: a catalog file breaks the schema. Every *FieldError is one.
	ErrInvalid = errors.New("invalid profile catalog")
	// ErrUnknownProfile: no profile has that name.
	ErrUnknownProfile = errors.New("unknown profile")
	// ErrWrongGPU: the profile is for another GPU model.
	ErrWrongGPU = errors.New("profile does not fit this GPU")
	// ErrCannotSplit: the GPU cannot make that split right now.
	ErrCannotSplit = errors.New("GPU cannot make this split")
)

// FieldError is one problem in a catalog file, said so an admin can fix it:
// the file, the line, the field's path, what is wrong and what is allowed.
//
//	profiles/mi25.yaml:14: profiles[2].split: 3 is not allowed; allowed: 1, 2, 4, 8, 16
type FieldError struct {
	File    string
	Line    int    // 0 when unknown
	Field   string // "profiles[2].split"; "" for the whole file
	Problem string // "3 is not allowed"
	Allowed string // "1, 2, 4, 8, 16"; "" when there is nothing to offer
	Err     error  // the underlying cause (a YAML syntax error), or nil
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Problem)
	if e.Allowed != "" {
		b.WriteString("; allowed: ")
		b.WriteString(e.Allowed)
	}
	return b.String()
}

// Unwrap lets errors.Is find ErrInvalid and the cause.
func (e *FieldError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

// refusal is a Resolve error: a full sentence for the admin that still
// matches its sentinel with errors.Is.
type refusal struct {
	kind error
	msg  string
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.kind }

func refuse(kind error, format string, args ...any) error {
	return &refusal{kind: kind, msg: fmt.Sprintf(format, args...)}
}
