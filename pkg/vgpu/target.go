package vgpu

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
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
// the GPU there, a parent name (ValidParentName) a virtual mdev parent. A
// name with ':' was meant as an address, so its error is the address's.
func ParseTarget(s string) (Target, error) {
	a, err := ParsePCIAddress(s)
	switch {
	case err == nil:
		return GPU(a), nil
	case strings.Contains(s, ":"):
		return Target{}, err
	case !ValidParentName(s):
		return Target{}, fmt.Errorf("%q is neither a PCI address (DDDD:BB:DD.F, e.g. 0000:03:00.0) nor an mdev parent name (%s)", s, ParentRule)
	}
	return Parent(s), nil
}

// ParseParent reads the name of a virtual mdev parent.
func ParseParent(name string) (Target, error) {
	if !ValidParentName(name) {
		return Target{}, fmt.Errorf("%q is not an mdev parent name (%s)", name, ParentRule)
	}
	return Parent(name), nil
}

// ParentRule says what ValidParentName accepts, for messages.
const ParentRule = "one name under /sys/class/mdev_bus that names a virtual mdev parent, e.g. mbochs, matrix or 0.0.0313: " +
	"1 to 255 bytes of printable characters without whitespace, '/' or ':' (an address names a GPU), not . or .."

// ValidParentName reports whether s may name a virtual mdev parent: the
// one rule for every layer (CLI, config, profiles, ledger, allocator).
// /sys/class/mdev_bus links each parent by its device name, which the
// kernel lets be anything without '/' (kobject_set_name turns '/' into
// '!'), such as the samples' mbochs, mdpy and mtty, vfio-ccw's subchannels
// (0.0.0313) and vfio-ap's matrix. Bounded as an admin expects: a path
// element opens only up to NAME_MAX (255) bytes; printable, without
// whitespace, so it reads back as written; no ':', so it is never taken
// for a PCI address, which names a GPU.
func ValidParentName(s string) bool {
	if s == "" || len(s) > 255 || s == "." || s == ".." || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r == '/' || r == ':' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
