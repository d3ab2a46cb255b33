package profile

import (
	"errors"
	"fmt"

	"github.com/vgpu-project/vgpu/internal/strictyaml"
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
//	profiles/mi25.yaml:14: profiles[2].split: 17 is not allowed; allowed: 1 to 16
type FieldError = strictyaml.FieldError

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
