package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

func TestErrno(t *testing.T) {
	wrapped := fmt.Errorf("ctx: %w", &fs.PathError{Op: "write", Path: "/sys/x", Err: syscall.ENOENT})
	got := Errno(wrapped)
	if got != syscall.ENOENT {
		t.Fatalf("Errno = %#v, want ENOENT", got)
	}
	if !errors.Is(got, fs.ErrNotExist) {
		t.Fatal("the bare errno no longer matches fs.ErrNotExist")
	}
	plain := errors.New("no errno here")
	if Errno(plain) != plain {
		t.Fatal("an error without errno was replaced")
	}
}
