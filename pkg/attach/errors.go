package attach

import (
	"errors"
	"fmt"
)

// ErrBadInput marks a refusal of the request itself (a profile the domain
// cannot take, --live on a domain that does not run, an id it does not
// have): nothing changed, and asking again the same way fails again.
var ErrBadInput = errors.New("bad input")

// inputError is a refusal whose message is its cause's alone.
type inputError struct{ err error }

func (e inputError) Error() string   { return e.err.Error() }
func (e inputError) Unwrap() []error { return []error{e.err, ErrBadInput} }

func badInput(format string, args ...any) error {
	return inputError{fmt.Errorf(format, args...)}
}

// ErrUndo marks an attach that failed and could not undo all it had done:
// a vGPU may stay reserved in vgpud or a hostdev in the definition. The
// error names each undo that failed (vgpuctl exits 4, as for a carve).
var ErrUndo = errors.New("attach partly undone")

// undoError is an attach left partly done; its message is its cause's
// and a pointer to the repair.
type undoError struct{ err error }

func (e undoError) Error() string   { return e.err.Error() }
func (e undoError) Unwrap() []error { return []error{e.err, ErrUndo} }
