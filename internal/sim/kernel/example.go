package simkernel

import (
	"fmt"
	"path/filepath"
	"runtime"
)

// ExampleHost reads examples/hosts/<name> of this source tree (found from
// this file's place, so from any package's tests, whatever their working
// directory).
func ExampleHost(name string) (Host, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return Host{}, fmt.Errorf("load example host %s: the source tree's place is unknown", name)
	}
	return LoadHost(filepath.Join(filepath.Dir(file), "..", "..", "..", "examples", "hosts", name))
}

// LoadExample is a Kernel on examples/hosts/<name> (see ExampleHost).
func LoadExample(name string) (*Kernel, error) {
	h, err := ExampleHost(name)
	if err != nil {
		return nil, err
	}
	k, err := New(h)
	if err != nil {
		return nil, fmt.Errorf("example host %s: %w", name, err)
	}
	return k, nil
}

// TB is what NewExample and NewFor need of a testing.TB; an interface of
// its own keeps package testing out of vgpusim, which links this package.
type TB interface {
	Helper()
	Fatal(args ...any)
}

// NewExample is LoadExample for a test or benchmark: an error fails t.
func NewExample(t TB, name string) *Kernel {
	t.Helper()
	k, err := LoadExample(name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// NewFor is New for a test or benchmark: an error fails t.
func NewFor(t TB, h Host) *Kernel {
	t.Helper()
	k, err := New(h)
	if err != nil {
		t.Fatal(fmt.Sprintf("build the simulated kernel: %v", err))
	}
	return k
}
