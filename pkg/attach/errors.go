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
