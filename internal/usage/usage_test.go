package usage

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
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
