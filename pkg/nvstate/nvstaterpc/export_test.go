package nvstaterpc

import (
	"io"
	"time"
)

// ExecWith is Exec with the idle time and the call timeout a test picks.
func ExecWith(path string, args []string, stderr io.Writer, idle, timeout time.Duration) *Client {
	return execClient(path, func() (string, error) { return path, nil }, args, stderr, idle, timeout)
}
