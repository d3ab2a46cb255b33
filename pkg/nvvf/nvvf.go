package nvvf

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Errors callers branch on.
var (
	// ErrNoNVIDIADir: the VF has no nvidia/ directory (not an NVIDIA VF on a
	// per-VF vGPU driver).
	ErrNoNVIDIADir = errors.New("no nvidia/ directory")
	// ErrNotCreatable: the type is not in the VF's creatable_vgpu_types now.
	ErrNotCreatable = errors.New("vGPU type not creatable")
	// ErrTypeSet: the VF already carries another type; clear it first.
	ErrTypeSet = errors.New("VF already has a vGPU type")
)

// Dir is a VF's nvidia/ directory.
func Dir(vf pci.Address) string { return pci.DevicePath(vf) + "/nvidia" }

// ParseCreatable reads creatable_vgpu_types:
//
//	ID    : vGPU Name
//	1145  : NVIDIA L40S-1B
//
// The header line and blank lines are skipped; any other line that is not
// "<id> : <name>" is an error naming it. An empty list (only the header)
// is what a VF shows when nothing fits any more.
func ParseCreatable(s string) ([]VGPUType, error) {
	var out []VGPUType
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		id, name, ok := strings.Cut(line, ":")
		id, name = strings.TrimSpace(id), strings.TrimSpace(name)
		if ok && id == "ID" && name == "vGPU Name" {
			continue
		}
		n, err := strconv.Atoi(id)
		if !ok || err != nil || n <= 0 || name == "" {
			return nil, fmt.Errorf("parse creatable_vgpu_types line %d: %q is not \"<id> : <name>\"", i+1, line)
		}
		out = append(out, VGPUType{ID: n, Name: name})
	}
	return out, nil
}

// Read returns what vf can become and what it is (current 0: nothing).
// ok is false when vf has no nvidia/ directory.
func Read(f sysfs.FS, vf pci.Address) (creatable []VGPUType, current int, ok bool, err error) {
	dir := Dir(vf)
	ok, err = sysfs.Exists(f, dir)
	if err != nil || !ok {
		return nil, 0, false, err
	}
	b, err := f.ReadFile(dir + "/creatable_vgpu_types")
	if err != nil {
		return nil, 0, false, fmt.Errorf("read %s/creatable_vgpu_types: %w", dir, sysfs.Errno(err))
	}
	creatable, err = ParseCreatable(string(b))
	if err != nil {
		return nil, 0, false, fmt.Errorf("%s: %w", dir, err)
	}
	cur, err := sysfs.ReadInt(f, dir+"/current_vgpu_type")
	if err != nil {
		return nil, 0, false, err
	}
	return creatable, int(cur), true, nil
}

// SetType makes vf a vGPU of type id. Setting the type it already has does
// nothing; a VF with another type, or a type not creatable now, is refused
// before writing, with what is creatable.
func SetType(f sysfs.FS, vf pci.Address, id int) error {
	p := Dir(vf) + "/current_vgpu_type"
	act := fmt.Sprintf("set vGPU type %d on %s via %s", id, vf, p)
	if id <= 0 {
		return fmt.Errorf("%s: type ids are positive (ClearType frees a VF)", act)
	}
	creatable, cur, ok, err := Read(f, vf)
	if err != nil {
		return fmt.Errorf("%s: %w", act, err)
	}
	if !ok {
		return fmt.Errorf("%s: %w at %s (not an NVIDIA VF, or its driver lacks per-VF vGPU)", act, ErrNoNVIDIADir, Dir(vf))
	}
	if cur == id {
		return nil
	}
	if cur != 0 {
		return fmt.Errorf("%s: %w (type %d); clear it first", act, ErrTypeSet, cur)
	}
	found := false
	for _, t := range creatable {
		found = found || t.ID == id
	}
	if !found {
		return fmt.Errorf("%s: %w: %s can create %s", act, ErrNotCreatable, vf, describe(creatable))
	}
	if err := f.WriteFile(p, []byte(strconv.Itoa(id))); err != nil {
		return fmt.Errorf("%s: %w", act, sysfs.Errno(err))
	}
	return nil
}

// ClearType frees vf's vGPU (writes 0); a free VF is left alone. The
// driver refuses while a VM uses the vGPU.
func ClearType(f sysfs.FS, vf pci.Address) error {
	p := Dir(vf) + "/current_vgpu_type"
	act := fmt.Sprintf("clear the vGPU type of %s via %s", vf, p)
	_, cur, ok, err := Read(f, vf)
	if err != nil {
		return fmt.Errorf("%s: %w", act, err)
	}
	if !ok {
		return fmt.Errorf("%s: %w at %s", act, ErrNoNVIDIADir, Dir(vf))
	}
	if cur == 0 {
		return nil
	}
	if err := f.WriteFile(p, []byte("0")); err != nil {
		errno := sysfs.Errno(err)
		if errors.Is(errno, syscall.EBUSY) {
			return fmt.Errorf("%s: type %d is in use (is a VM running on it?): %w", act, cur, errno)
		}
		return fmt.Errorf("%s: %w", act, errno)
	}
	return nil
}

func describe(ts []VGPUType) string {
	if len(ts) == 0 {
		return "nothing now (the siblings' vGPUs use the framebuffer)"
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = fmt.Sprintf("%d (%s)", t.ID, t.Name)
	}
	return strings.Join(parts, ", ")
}
