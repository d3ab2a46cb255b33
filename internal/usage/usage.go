package usage

import (
	"context"
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

// NoArgs is cobra.NoArgs whose refusal is bad input and names the help.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) != 0 {
		return Errorf("%s takes no arguments, got %q; see %s --help", cmd.CommandPath(), args, cmd.CommandPath())
	}
	return nil
}

// MarkArgs makes the argument checks of root and every command below it
// return bad input: cobra's own (MaximumNArgs, ExactArgs) return plain
// errors, which a tool would report as failures. Call it once every
// command is added. A command without Args keeps cobra's default, which
// Execute marks.
func MarkArgs(root *cobra.Command) {
	for _, c := range root.Commands() {
		MarkArgs(c)
	}
	if check := root.Args; check != nil {
		root.Args = func(cmd *cobra.Command, args []string) error { return Wrap(check(cmd, args)) }
	}
}

// Execute runs root with args as ExecuteContextC does. A word after the
// root that names no command fails cobra's own check (it runs before any
// command, so no Args can mark it): that failure comes back as bad input.
func Execute(ctx context.Context, root *cobra.Command, args []string) error {
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil || cmd != root || Is(err) {
		return err
	}
	// The check ExecuteContextC failed on, asked again.
	if _, _, ferr := root.Find(args); ferr != nil && ferr.Error() == err.Error() {
		return Wrap(err)
	}
	return err
}
