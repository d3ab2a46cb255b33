package mdevctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/uuid"
)

// DefaultDir is where mdevctl keeps its definitions on a host.
const DefaultDir = "/etc/mdevctl.d"

// DirUnder is mdevctl's directory on the host whose root is root:
// etc/mdevctl.d beneath it, where mdevctl 1.3+ also looks when
// MDEVCTL_ENV_ROOT names that root (1.2 always reads /etc/mdevctl.d).
func DirUnder(root string) string { return filepath.Join(root, "etc", "mdevctl.d") }

// scriptsDir holds mdevctl's callout and notifier scripts, not a parent.
const scriptsDir = "scripts.d"

// StartAuto is the start mode mdevctl starts a definition in by itself.
const StartAuto = "auto"

// Attr is one of a definition's attrs: a sysfs attribute of the mdev
// (a path under /sys/bus/mdev/devices/<uuid>) that mdevctl writes, in
// order, after creating it.
type Attr struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Definition is one file of mdevctl's directory.
type Definition struct {
	// Parent is the directory the file is in: the mdev parent as
	// /sys/class/mdev_bus names it (a PCI address, or mbochs).
	Parent string `json:"parent"`
	// UUID is the file's name in canonical form.
	UUID string `json:"uuid"`
	// Type is mdev_type: the type's directory under mdev_supported_types.
	Type string `json:"type"`
	// Start is start as written; mdevctl takes anything but "auto" for
	// manual (mdev.rs load_from_json).
	Start string `json:"start"`
	Attrs []Attr `json:"attrs,omitempty"`
	Path  string `json:"path"`
}

// Auto reports whether mdevctl starts the mdev when its parent appears.
func (d Definition) Auto() bool { return d.Start == StartAuto }

// ErrDefinition: a definition file mdevctl cannot read either.
var ErrDefinition = errors.New("invalid mdevctl definition")

// FileError is a definition file mdevctl would refuse, and why. mdevctl
// then fails every command that lists definitions, start-parent-mdevs
// included.
type FileError struct {
	Path    string
	Parent  string
	Problem string
}

func (e *FileError) Error() string {
	return fmt.Sprintf("mdevctl definition %s: %s", e.Path, e.Problem)
}

// Unwrap lets errors.Is find ErrDefinition.
func (e *FileError) Unwrap() error { return ErrDefinition }

// Read lists the definitions in dir by parent, then UUID, reading as
// mdevctl 1.2 and 1.3 do (environment.rs get_defined_devices): every
// directory but scripts.d is a parent, every regular file in it whose name
// is a UUID a definition; symlinks and other names are passed over, as
// mdevctl passes them. A file mdevctl would refuse is in bad, not defs. A
// missing dir (mdevctl not installed) holds no definitions.
func Read(dir string) (defs []Definition, bad []*FileError, err error) {
	parents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read mdevctl definitions: %w", err)
	}
	for _, p := range parents {
		if !p.IsDir() || p.Name() == scriptsDir {
			continue
		}
		pdir := filepath.Join(dir, p.Name())
		files, err := os.ReadDir(pdir)
		if err != nil {
			return nil, nil, fmt.Errorf("read mdevctl definitions of %s: %w", p.Name(), err)
		}
		for _, f := range files {
			if !f.Type().IsRegular() {
				continue
			}
			u, err := uuid.Parse(f.Name())
			if err != nil {
				continue
			}
			path := filepath.Join(pdir, f.Name())
			data, err := os.ReadFile(path)
			if err != nil {
				return nil, nil, fmt.Errorf("read mdevctl definition %s: %w", path, err)
			}
			d, problem := decode(data)
			if problem != "" {
				bad = append(bad, &FileError{Path: path, Parent: p.Name(), Problem: problem})
				continue
			}
			d.Parent, d.UUID, d.Path = p.Name(), u.String(), path
			defs = append(defs, d)
		}
	}
	slices.SortFunc(defs, func(a, b Definition) int {
		return cmpJoin(strings.Compare(a.Parent, b.Parent), strings.Compare(a.UUID, b.UUID))
	})
	return defs, bad, nil
}

func cmpJoin(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// decode reads one file as mdevctl's load_from_json and add_attributes
// do; problem says why mdevctl would refuse it ("" when it would not).
// Fields mdevctl does not know are ignored, as it ignores them.
func decode(data []byte) (Definition, string) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return Definition{}, fmt.Sprintf("not a JSON object: %v", err)
	}
	var d Definition
	isNull := func(raw json.RawMessage) bool { return raw == nil || string(raw) == "null" }
	if isNull(top["mdev_type"]) || isNull(top["start"]) {
		return d, `"mdev_type" and "start" are required`
	}
	if json.Unmarshal(top["mdev_type"], &d.Type) != nil {
		return d, fmt.Sprintf(`"mdev_type" is %s, not a string`, top["mdev_type"])
	}
	// A start that is not a string is manual to mdevctl, as any other.
	_ = json.Unmarshal(top["start"], &d.Start)
	if isNull(top["attrs"]) {
		return d, ""
	}
	var attrs []json.RawMessage
	if json.Unmarshal(top["attrs"], &attrs) != nil {
		return d, `"attrs" is not an array`
	}
	for i, raw := range attrs {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil || obj == nil {
			return d, fmt.Sprintf(`attrs[%d] is not an object`, i)
		}
		if len(obj) != 1 {
			return d, fmt.Sprintf(`attrs[%d] has %d fields; each attribute is an object of one`, i, len(obj))
		}
		for k, v := range obj {
			var s string
			if json.Unmarshal(v, &s) != nil {
				return d, fmt.Sprintf(`attrs[%d].%s is %s, not a string`, i, k, v)
			}
			d.Attrs = append(d.Attrs, Attr{Name: k, Value: s})
		}
	}
	return d, ""
}
