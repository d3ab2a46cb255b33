package sysfs

import (
	"errors"
	"syscall"
)

// Errno returns the kernel's errno carried by err (through *fs.PathError and
// any wrapping), or err itself when it carries none. Callers wrap the result
// under a message that already names the path, so the path is not repeated,
// and errors.Is(err, syscall.EBUSY) or fs.ErrNotExist still hold.
func Errno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}
