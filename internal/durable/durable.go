package durable

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, mode perm, so that a reader or a
// crash sees the old file or the new one, never a part: a temporary file
// in path's directory is written, fsynced, renamed over path, and the
// directory fsynced (without it the rename may not outlive a power loss).
// The directory must exist.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return writeFile(path, data, perm, (*os.File).Sync)
}

// writeFile is WriteFile with its fsync given (tests watch it).
func writeFile(path string, data []byte, perm fs.FileMode, sync func(*os.File) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".new-*")
	if err != nil {
		return fmt.Errorf("create a temporary file in %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	// CreateTemp makes 0600.
	if err := tmp.Chmod(perm); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("set the mode of %s: %w", tmp.Name(), err)
	}
	if err := sync(tmp); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp.Name(), path, err)
	}
	return syncDir(dir, sync)
}

// SyncDir flushes dir's entries to disk: a file renamed into it is there
// after a power loss, not only its data.
func SyncDir(dir string) error { return syncDir(dir, (*os.File).Sync) }

func syncDir(dir string, sync func(*os.File) error) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := sync(d); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
