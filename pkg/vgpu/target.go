package vgpu

import (
	"fmt"
	"strings"
)

// Target is what a carve, an uncarve or a GPU's lock is on: a GPU, by its
// PCI address, or a virtual mdev parent (one with no PCI device behind it,
// such as the kernel's mbochs sample), by name. Exactly one of the two is
// set.
type Target struct {
	GPU    PCIAddress
	Parent string
}

// GPU is the GPU at addr.
func GPU(addr PCIAddress) Target { return Target{GPU: addr} }

// Parent is the virtual mdev parent called name.
func Parent(name string) Target { return Target{Parent: name} }

// IsParent reports whether t is a virtual mdev parent, not a GPU.
func (t Target) IsParent() bool { return t.Parent != "" }

// String is the parent's name or the GPU's address.
func (t Target) String() string {
	if t.IsParent() {
		return t.Parent
	}
	return t.GPU.String()
}

// Describe names t in a message: the GPU's address, or "mdev parent"
// and the parent's name, which alone could be mistaken for anything.
func (t Target) Describe() string {
	if t.IsParent() {
		return "mdev parent " + t.Parent
	}
	return t.GPU.String()
}

// ParseTarget reads a target as an admin writes it: a PCI address names
// the GPU there, any other mdev parent name (ParseParent) a virtual mdev
// parent. A name with ':' was meant as an address, so its error is the
// address's.
func ParseTarget(s string) (Target, error) {
	a, err := ParsePCIAddress(s)
	switch {
	case err == nil:
		return GPU(a), nil
	case strings.Contains(s, ":"):
		return Target{}, err
	case !isParentName(s):
		return Target{}, fmt.Errorf("%q is neither a PCI address (DDDD:BB:DD.F, e.g. 0000:03:00.0) nor an mdev parent name %s", s, parentRule)
	}
	return Parent(s), nil
}

// ParseParent reads the name of a virtual mdev parent.
func ParseParent(name string) (Target, error) {
	if !isParentName(name) {
		return Target{}, fmt.Errorf("%q is not an mdev parent name %s", name, parentRule)
	}
	return Parent(name), nil
}

const parentRule = "(one name under /sys/class/mdev_bus, such as mbochs)"

// isParentName: one path element under /sys/class/mdev_bus (not empty,
// no '/', not . or ..) without ':', which is a PCI address's, a GPU's.
func isParentName(s string) bool {
	return s != "" && !strings.ContainsAny(s, ":/") && s != "." && s != ".."
}
