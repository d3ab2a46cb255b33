package attach

import (
	"errors"
	"fmt"
)

// ErrBadInput marks a refusal of the request itself (a profile the domain
// cannot take, --live on a domain that does not run, an id it does not
// have): nothing changed, and asking again the same way fails again.
var ErrBadInput = errors.New("bad input")

// marked is err matching mark too (ErrBadInput, ErrUndo); its message is
// err's alone.
type marked struct{ err, mark error }

func (e marked) Error() string   { return e.err.Error() }
func (e marked) Unwrap() []error { return []error{e.err, e.mark} }

func badInput(format string, args ...any) error {
	return marked{fmt.Errorf(format, args...), ErrBadInput}
}

// ErrUndo marks an attach that failed and could not undo all it had done:
// a vGPU may stay reserved in vgpud or a hostdev in the definition. The
// error names each undo that failed (vgpuctl exits 4, as for a carve).
var ErrUndo = errors.New("attach partly undone")
