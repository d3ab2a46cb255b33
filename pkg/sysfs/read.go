package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// ReadString reads an attribute and trims surrounding whitespace.
func ReadString(f FS, name string) (string, error) {
	b, err := f.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// ReadUint reads a number as sysfs prints it: "16", "0x10de".
func ReadUint(f FS, name string, bits int) (uint64, error) {
	s, err := ReadString(f, name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 0, bits)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %q is not a number: %w", name, s, err)
	}
	return v, nil
}

// ReadHex reads a bare hexadecimal id ("692f", as sriov_vf_device prints it).
func ReadHex(f FS, name string, bits int) (uint64, error) {
	s, err := ReadString(f, name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, bits)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %q is not a hex id: %w", name, s, err)
	}
	return v, nil
}

// ReadInt reads a signed number (numa_node is -1 without NUMA).
func ReadInt(f FS, name string) (int64, error) {
	s, err := ReadString(f, name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %q is not a number: %w", name, s, err)
	}
	return v, nil
}

// WriteString writes s to an attribute, naming the path on failure.
func WriteString(f FS, name, s string) error {
	if err := f.WriteFile(name, []byte(s)); err != nil {
		return fmt.Errorf("write %q to %s: %w", strings.TrimSpace(s), name, err)
	}
	return nil
}

// Exists reports whether name exists (following links). Errors other than
// "does not exist" are returned.
func Exists(f FS, name string) (bool, error) {
	_, err := f.Stat(name)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, fmt.Errorf("stat %s: %w", name, err)
}

// LinkBase returns the last element of a symlink's target: the driver name
// of ".../driver", the group number of ".../iommu_group". ok is false when
// the link does not exist.
func LinkBase(f FS, name string) (base string, ok bool, err error) {
	t, err := f.Readlink(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("readlink %s: %w", name, err)
	}
	return path.Base(t), true, nil
}

// ResolveLink returns the absolute path a symlink at name points to.
func ResolveLink(f FS, name string) (string, error) {
	t, err := f.Readlink(name)
	if err != nil {
		return "", fmt.Errorf("readlink %s: %w", name, err)
	}
	if path.IsAbs(t) {
		return path.Clean(t), nil
	}
	return path.Join(path.Dir(name), t), nil
}

// Names lists the entry names of a directory; a missing directory is empty.
func Names(f FS, dir string) ([]string, error) {
	ents, err := f.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}
