package usage

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// badInput marks err as the user's bad input.
type badInput struct{ err error }

func (e badInput) Error() string { return e.err.Error() }
func (e badInput) Unwrap() error { return e.err }

// Errorf is fmt.Errorf's error marked as bad input.
func Errorf(format string, args ...any) error { return badInput{fmt.Errorf(format, args...)} }

// Wrap marks err as bad input; nil stays nil.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	return badInput{err}
}

// Is reports whether err, or an error it wraps, is marked as bad input.
func Is(err error) bool {
	var b badInput
	return errors.As(err, &b)
}

// FlagError is a cobra command's SetFlagErrorFunc: a flag cobra cannot
// parse is bad input.
func FlagError(_ *cobra.Command, err error) error { return Wrap(err) }
