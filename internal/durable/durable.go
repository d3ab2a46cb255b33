// Package durable holds what makes a file replaced by rename survive a
// crash.
package durable

import (
	"fmt"
	"os"
)

// SyncDir flushes dir's entries to disk: a file renamed into it is there
// after a power loss, not only its data.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
