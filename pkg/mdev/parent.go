package mdev

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Errors callers branch on. Errors from this package also keep the
// kernel's errno (errors.Is(err, syscall.ENOSPC)).
var (
	ErrNoParent    = errors.New("no such mdev parent")
	ErrNoType      = errors.New("no such mdev type")
	ErrNotFound    = errors.New("no such mdev")
	ErrExists      = errors.New("mdev already exists")
	ErrNoCapacity  = errors.New("no mdev capacity left")
	ErrInvalidUUID = errors.New("invalid mdev UUID")
)

// opError reads as msg plus the kernel's cause, and matches both a sentinel
// (what callers branch on) and the errno (what the kernel said).
type opError struct {
	msg   string
	kind  error
	cause error
}

func (e *opError) Error() string   { return e.msg + ": " + e.cause.Error() }
func (e *opError) Unwrap() []error { return []error{e.kind, e.cause} }

func parentDir(parent string) string { return sysfs.MdevBusClass + "/" + parent }

func typeDir(parent, typeID string) string {
	return parentDir(parent) + "/mdev_supported_types/" + typeID
}

func validName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\n")
}

// checkParentName refuses a parent that cannot be a sysfs device name.
func checkParentName(parent string) error {
	if !validName(parent) {
		return fmt.Errorf("%w %q: not a device name", ErrNoParent, parent)
	}
	return nil
}

func requireParent(f sysfs.FS, parent string) error {
	if err := checkParentName(parent); err != nil {
		return err
	}
	ok, err := sysfs.Exists(f, parentDir(parent))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w %s (no %s; is its vendor driver loaded?)", ErrNoParent, parent, parentDir(parent))
	}
	return nil
}

// Parents lists the devices that offer mdev types: PCI addresses
// ("0000:00:02.0", VFs included) and virtual parents ("mbochs"), sorted.
func Parents(f sysfs.FS) ([]string, error) {
	names, err := sysfs.Names(f, sysfs.MdevBusClass)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// IsParent reports whether name offers mdev types.
func IsParent(f sysfs.FS, name string) (bool, error) {
	if !validName(name) {
		return false, nil
	}
	return sysfs.Exists(f, parentDir(name))
}

// ParentPath returns the parent's device directory, resolved from its
// /sys/class/mdev_bus link ("/sys/devices/pci0000:00/0000:00:02.0").
func ParentPath(f sysfs.FS, parent string) (string, error) {
	if err := requireParent(f, parent); err != nil {
		return "", err
	}
	return sysfs.ResolveLink(f, parentDir(parent))
}

// Types lists what parent can create, by type id, with each type's live
// counters and existing instances.
func Types(f sysfs.FS, parent string) ([]Type, error) {
	if c, ok := f.(CachedFS); ok {
		return c.Types.types(c.FS, parent, c.Lean)
	}
	if err := requireParent(f, parent); err != nil {
		return nil, err
	}
	ids, err := sysfs.Names(f, parentDir(parent)+"/mdev_supported_types")
	if err != nil {
		return nil, err
	}
	sort.Strings(ids)
	instances, err := instancesByType(f, parent)
	if err != nil {
		return nil, err
	}
	out := make([]Type, 0, len(ids))
	for _, id := range ids {
		t, err := readFixed(f, parent, id)
		if err == nil {
			t, err = readLive(f, parent, t, instances)
		}
		if err != nil {
			return nil, fmt.Errorf("read mdev types of %s: %w", parent, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// readFixed reads what the driver fixes about a type when it registers
// its parent: name, description, device_api.
func readFixed(f sysfs.FS, parent, id string) (Type, error) {
	dir := typeDir(parent, id)
	t := Type{ID: id}
	name, err := readOptional(f, dir+"/name")
	if err != nil {
		return t, err
	}
	t.Name = name
	if t.Name == "" {
		t.Name = id // what kernels >= 6.1 print for drivers without names
	}
	if t.Description, err = readOptional(f, dir+"/description"); err != nil {
		return t, err
	}
	if t.DeviceAPI, err = sysfs.ReadString(f, dir+"/device_api"); err != nil {
		return t, err
	}
	t.MaxInstances, t.FramebufferMB = ParseDescription(t.Description)
	return t, nil
}

// readLive adds to fixed what changes with each mdev made or removed:
// available_instances, and its instances from instances (instancesByType).
func readLive(f sysfs.FS, parent string, fixed Type, instances map[string][]string) (Type, error) {
	t := fixed
	avail, err := sysfs.ReadInt(f, typeDir(parent, t.ID)+"/available_instances")
	if err != nil {
		return t, err
	}
	t.AvailableInstances, t.Instances = int(avail), instances[t.ID]
	return t, nil
}

// readOptional reads an attribute the kernel may not provide: "" if absent.
func readOptional(f sysfs.FS, name string) (string, error) {
	s, err := sysfs.ReadString(f, name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return s, err
}

// IsGVTg reports whether id is an Intel GVT-g type (i915-GVTg_V5_4). Its
// suffix is no count: how many fit is what available_instances says, from
// the aperture the firmware set and the GPU's fences (i915 gvt/kvmgt.c
// intel_vgpu_get_available), and _8 never makes 8 on Gen9 (28 guest fences).
func IsGVTg(id string) bool {
	// i915-GVTg_V<digits>_<digits>, matched by hand: a package-level
	// regexp is compiled at every start of every binary linking this.
	rest, ok := strings.CutPrefix(id, "i915-GVTg_V")
	if !ok {
		return false
	}
	gen, count, ok := strings.Cut(rest, "_")
	return ok && digits(gen) && digits(count)
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// videoMemory reads mbochs' "<n> MB video memory" (case aside), false for
// anything else.
func videoMemory(seg string) (uint64, bool) {
	n := strings.IndexFunc(seg, func(r rune) bool { return r < '0' || r > '9' })
	if n <= 0 || !strings.EqualFold(strings.TrimLeft(seg[n:], " \t"), "MB video memory") {
		return 0, false
	}
	v, err := strconv.ParseUint(seg[:n], 10, 64)
	return v, err == nil
}

// ParseDescription reads the figures a type description states, 0 where it
// says nothing. It knows three dialects:
//
//	NVIDIA: "num_heads=4, frl_config=60, framebuffer=4096M, max_resolution=7680x4320, max_instance=4"
//	mbochs: "virtual display, 64 MB video memory"
//	GVT-g:  "low_gm_size: 64MB\nhigh_gm_size: 384MB\nfence: 4\n..."
//
// GVT-g's low/high GM sizes are ranges of the shared graphics address space
// carved from system memory, not a framebuffer of the GPU's own, so they
// give no framebufferMB; how many fit is in available_instances (IsGVTg).
func ParseDescription(desc string) (maxInstances int, framebufferMB uint64) {
	for _, seg := range strings.FieldsFunc(desc, func(r rune) bool { return r == ',' || r == '\n' }) {
		seg = strings.TrimSpace(seg)
		if v, ok := videoMemory(seg); ok {
			framebufferMB = v
			continue
		}
		i := strings.IndexAny(seg, "=:")
		if i < 0 {
			continue
		}
		key := strings.ToLower(strings.TrimSpace(seg[:i]))
		val := strings.TrimSpace(seg[i+1:])
		switch key {
		case "max_instance", "max_instances":
			if v, err := strconv.Atoi(val); err == nil && v > 0 {
				maxInstances = v
			}
		case "framebuffer":
			framebufferMB = parseMB(val)
		}
	}
	return maxInstances, framebufferMB
}

// parseMB reads "4096M", "16G", "512MB", "1024 MiB" as MiB; a number
// without a unit is not trusted (0).
func parseMB(s string) uint64 {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i <= 0 {
		return 0
	}
	v, err := strconv.ParseUint(s[:i], 10, 64)
	if err != nil {
		return 0
	}
	unit := strings.ToUpper(strings.TrimSpace(s[i:]))
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	switch unit {
	case "K":
		return v / 1024
	case "M":
		return v
	case "G":
		return v * 1024
	case "T":
		return v * 1024 * 1024
	}
	return 0
}
