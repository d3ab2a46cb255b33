package sysfs

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// OS is the FS of a real kernel, or of a simulated one mounted at Root.
type OS struct {
	Root string
	// Tools overrides where vendor tools are (by tool name); unset, they
	// are at the vendor's install path under Root.
	Tools map[string]string
}

var (
	_ FS         = OS{}
	_ ToolRunner = OS{}
)

// NewOS returns an FS rooted at root ("/" in production).
func NewOS(root string) OS {
	if root == "" {
		root = "/"
	}
	return OS{Root: root}
}

func (o OS) path(name string) string { return filepath.Join(o.Root, name) }

// ReadFile implements FS.
func (o OS) ReadFile(name string) ([]byte, error) { return os.ReadFile(o.path(name)) }

// WriteFile implements FS.
func (o OS) WriteFile(name string, data []byte) error {
	f, err := os.OpenFile(o.path(name), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	if cerr != nil {
		return fmt.Errorf("close %s: %w", o.path(name), cerr)
	}
	return nil
}

// ReadDir implements FS.
func (o OS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(o.path(name)) }

// Readlink implements FS.
func (o OS) Readlink(name string) (string, error) { return os.Readlink(o.path(name)) }

// Lstat implements FS.
func (o OS) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(o.path(name)) }

// Stat implements FS.
func (o OS) Stat(name string) (fs.FileInfo, error) { return os.Stat(o.path(name)) }

// OpenDevice implements FS.
func (o OS) OpenDevice(name string) (io.Closer, error) {
	return os.OpenFile(o.path(name), os.O_RDWR, 0)
}
