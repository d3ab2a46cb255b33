package usage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestMarks: an error marked here is bad input through any wrapping and
// keeps its text and what it wraps; an unmarked one is not, nor is nil.
func TestMarks(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		text string
	}{
		{"Errorf", Errorf("--count %d: want 1 to %d", 0, 4), "--count 0: want 1 to 4"},
		{"Errorf wrapping", Errorf("read host config: %w", fs.ErrNotExist), "read host config: file does not exist"},
		{"Wrap", Wrap(fs.ErrNotExist), "file does not exist"},
		{"FlagError", FlagError(nil, errors.New(`unknown flag: --bogus`)), "unknown flag: --bogus"},
		{"wrapped again", fmt.Errorf("carve: %w", Wrap(fs.ErrNotExist)), "carve: file does not exist"},
	} {
		if !Is(tc.err) {
			t.Errorf("%s: %v is not bad input", tc.name, tc.err)
		}
		if tc.err.Error() != tc.text {
			t.Errorf("%s: text %q, want %q", tc.name, tc.err, tc.text)
		}
	}
	if err := Errorf("read host config: %w", fs.ErrNotExist); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Errorf lost what it wraps: %v", err)
	}
	if err := Wrap(fs.ErrNotExist); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Wrap lost what it wraps: %v", err)
	}
	if Is(fs.ErrNotExist) || Is(fmt.Errorf("x: %w", fs.ErrNotExist)) || Is(nil) {
		t.Error("an unmarked error counts as bad input")
	}
	if Wrap(nil) != nil {
		t.Error("Wrap(nil) is not nil")
	}
}

// TestCobraArgs: cobra's own argument checks (an unknown command, an Args
// of cobra's) come back as bad input, a command's own failure does not,
// and the root's help still runs.
func TestCobraArgs(t *testing.T) {
	root := &cobra.Command{Use: "tool", SilenceErrors: true, SilenceUsage: true}
	boom := errors.New("boom")
	root.AddCommand(
		&cobra.Command{Use: "one", Args: cobra.MaximumNArgs(1), RunE: func(*cobra.Command, []string) error { return nil }},
		&cobra.Command{Use: "none", Args: NoArgs, RunE: func(*cobra.Command, []string) error { return nil }},
		&cobra.Command{Use: "fails", RunE: func(*cobra.Command, []string) error { return boom }},
	)
	MarkArgs(root)
	root.SetOut(io.Discard)
	for _, tc := range []struct {
		args []string
		bad  bool
		text string
	}{
		{[]string{"nope"}, true, `unknown command "nope" for "tool"`},
		{[]string{"one", "a", "b"}, true, "accepts at most 1 arg(s), received 2"},
		{[]string{"none", "a"}, true, `tool none takes no arguments, got ["a"]; see tool none --help`},
		{[]string{"fails"}, false, "boom"},
		{[]string{"one", "a"}, false, ""},
		{[]string{}, false, ""},
		{[]string{"help", "one"}, false, ""},
	} {
		err := Execute(context.Background(), root, tc.args)
		switch {
		case tc.text == "" && err != nil:
			t.Errorf("%q: %v, want success", tc.args, err)
		case tc.text != "" && (err == nil || !strings.Contains(err.Error(), tc.text)):
			t.Errorf("%q: %v, want %q", tc.args, err, tc.text)
		case err != nil && Is(err) != tc.bad:
			t.Errorf("%q: %v is bad input: %v, want %v", tc.args, err, Is(err), tc.bad)
		}
	}
}
