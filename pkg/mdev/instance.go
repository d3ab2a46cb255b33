package mdev

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Instance is one existing mdev.
type Instance struct {
	UUID       string `json:"uuid"`
	Parent     string `json:"parent"` // mdev_bus name: "0000:00:02.0", "mbochs"
	Type       string `json:"type"`   // type id
	IOMMUGroup int    `json:"iommuGroup"`
	Driver     string `json:"driver,omitempty"` // "nvidia-vgpu-vfio", "mtty"; "" when unbound
}

// ValidateUUID returns s in the canonical lowercase form the kernel names
// mdevs by. Only the 8-4-4-4-12 form is accepted, as the kernel does.
func ValidateUUID(s string) (string, error) {
	u, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return "", fmt.Errorf("%w %q: want 8-4-4-4-12 hex digits such as 6f8b1d6e-2c3a-4f5b-9d7e-0a1b2c3d4e5f", ErrInvalidUUID, s)
	}
	return u.String(), nil
}

func devDir(u string) string { return sysfs.MdevDevices + "/" + u }

// Instances lists the host's mdevs, by UUID.
func Instances(f sysfs.FS) ([]Instance, error) {
	names, err := sysfs.Names(f, sysfs.MdevDevices)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]Instance, 0, len(names))
	for _, n := range names {
		in, ok, err := Get(f, n)
		if err != nil {
			return nil, err
		}
		if ok { // else removed while we listed
			out = append(out, in)
		}
	}
	return out, nil
}

// Get describes the mdev id; ok is false when it does not exist.
func Get(f sysfs.FS, id string) (Instance, bool, error) {
	u, err := ValidateUUID(id)
	if err != nil {
		return Instance{}, false, err
	}
	dir := devDir(u)
	// The bus entry links to <parent device>/<uuid>; it goes with the mdev.
	target, err := sysfs.ResolveLink(f, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Instance{}, false, nil
	}
	if err != nil {
		return Instance{}, false, err
	}
	in := Instance{UUID: u, Parent: path.Base(path.Dir(target)), IOMMUGroup: -1}
	typ, ok, err := sysfs.LinkBase(f, dir+"/mdev_type")
	if err != nil {
		return Instance{}, false, err
	}
	if !ok {
		return Instance{}, false, fmt.Errorf("read mdev %s: no %s/mdev_type link", u, dir)
	}
	in.Type = typ
	if g, ok, err := pci.ReadGroupLink(f, dir+"/iommu_group"); err != nil {
		return Instance{}, false, err
	} else if ok {
		in.IOMMUGroup = g
	}
	if in.Driver, _, err = sysfs.LinkBase(f, dir+"/driver"); err != nil {
		return Instance{}, false, err
	}
	return in, true, nil
}

// Binding reads mdev id's IOMMU group (-1 where it has none) and driver
// ("" when unbound): what a caller that listed the mdev from its parent's
// types (Types) still needs, two accesses where Get makes four. An mdev
// removed since it was listed reads as unbound, with no group.
func Binding(f sysfs.FS, id string) (group int, driver string, err error) {
	u, err := ValidateUUID(id)
	if err != nil {
		return -1, "", err
	}
	dir := devDir(u)
	if group, _, err = pci.ReadGroupLink(f, dir+"/iommu_group"); err != nil {
		return -1, "", err
	}
	if driver, _, err = sysfs.LinkBase(f, dir+"/driver"); err != nil {
		return -1, "", err
	}
	return group, driver, nil
}

// Create makes mdev id of typeID on parent. The UUID and names are checked
// before anything is written; the kernel's refusals come back as ErrExists,
// ErrNoCapacity, ErrNoParent or ErrNoType with the errno kept.
func Create(f sysfs.FS, parent, typeID, id string) error {
	u, err := ValidateUUID(id)
	if err != nil {
		return fmt.Errorf("create mdev on %s: %w", parent, err)
	}
	p := typeDir(parent, typeID) + "/create"
	act := fmt.Sprintf("create mdev %s of type %s on %s via %s", u, typeID, parent, p)
	if err := checkParentName(parent); err != nil {
		return fmt.Errorf("%s: %w", act, err)
	}
	if !validName(typeID) {
		return fmt.Errorf("%s: %w %q", act, ErrNoType, typeID)
	}
	// Write first and ask why only when the kernel refuses: checking the
	// parent and type beforehand cost two lookups for every mdev made.
	err = f.WriteFile(p, []byte(u))
	if err == nil {
		return nil
	}
	errno := sysfs.Errno(err)
	switch {
	case errors.Is(errno, syscall.ENOENT):
		if err := requireParent(f, parent); err != nil {
			return fmt.Errorf("%s: %w", act, err)
		}
		if ok, err := sysfs.Exists(f, typeDir(parent, typeID)); err == nil && !ok {
			ids, _ := sysfs.Names(f, parentDir(parent)+"/mdev_supported_types")
			sort.Strings(ids)
			return fmt.Errorf("%s: %w: %s offers %s", act, ErrNoType, parent, listOrNone(ids))
		}
	case errors.Is(errno, syscall.EEXIST):
		why := fmt.Sprintf("%s: mdev %s already exists", act, u)
		if in, ok, gerr := Get(f, u); gerr == nil && ok {
			why += fmt.Sprintf(" (type %s on %s)", in.Type, in.Parent)
		}
		return &opError{msg: why, kind: ErrExists, cause: errno}
	case errors.Is(errno, syscall.ENOSPC), errors.Is(errno, syscall.EUSERS): // mdpy says EUSERS
		avail := "?"
		if n, aerr := sysfs.ReadInt(f, typeDir(parent, typeID)+"/available_instances"); aerr == nil {
			avail = strconv.FormatInt(n, 10)
		}
		return &opError{
			msg:   fmt.Sprintf("%s: no instance of %s fits on %s (available_instances %s)", act, typeID, parent, avail),
			kind:  ErrNoCapacity,
			cause: errno,
		}
	case errors.Is(errno, syscall.EINVAL):
		return fmt.Errorf("%s: the kernel rejected the UUID: %w", act, errno)
	}
	return fmt.Errorf("%s: %w", act, errno)
}

// Remove destroys mdev id. An absent mdev is ErrNotFound. On a real kernel
// the write blocks while a VFIO user (a running VM) holds the mdev.
func Remove(f sysfs.FS, id string) error {
	u, err := ValidateUUID(id)
	if err != nil {
		return fmt.Errorf("remove mdev: %w", err)
	}
	p := devDir(u) + "/remove"
	act := fmt.Sprintf("remove mdev %s via %s", u, p)
	// No lookup first: a missing mdev has no remove file (ENOENT below).
	err = f.WriteFile(p, []byte("1"))
	if err == nil {
		return nil
	}
	errno := sysfs.Errno(err)
	if errors.Is(errno, syscall.ENOENT) {
		return &opError{msg: fmt.Sprintf("%s: mdev %s does not exist", act, u), kind: ErrNotFound, cause: errno}
	}
	return fmt.Errorf("%s: %w", act, errno)
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "no types"
	}
	return strings.Join(s, ", ")
}
