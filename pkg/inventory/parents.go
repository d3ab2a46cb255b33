package inventory

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// MdevParent is an mdev parent that Discover does not cover: a virtual
// device (mbochs, mtty, mdpy) or a PCI function that is neither a GPU nor a
// VF of one.
type MdevParent struct {
	Name string `json:"name"` // /sys/class/mdev_bus entry: "mbochs"
	Path string `json:"path"` // resolved device directory
	// PCI is set for a PCI parent, with its names from pci.ids.
	PCI        *pci.Address `json:"pci,omitempty"`
	VendorName string       `json:"vendorName,omitempty"`
	DeviceName string       `json:"deviceName,omitempty"`
	Types      []MdevType   `json:"types"`
}

// MdevParents lists the mdev parents outside Discover's GPUs, by name, so
// that a listing of GPUs can show them too.
func MdevParents(f sysfs.FS, names *Names) ([]MdevParent, error) {
	parents, err := mdev.Parents(f)
	if err != nil {
		return nil, fmt.Errorf("list mdev parents: %w", err)
	}
	var out []MdevParent
	for _, name := range parents {
		p := MdevParent{Name: name}
		if a, err := pci.ParseAddress(name); err == nil {
			covered, err := coveredByDiscover(f, a)
			if err != nil {
				return nil, fmt.Errorf("list mdev parents: %w", err)
			}
			if covered {
				continue
			}
			vendor, device, _, err := pci.ReadIDs(f, a)
			if err != nil {
				return nil, fmt.Errorf("list mdev parents: %w", err)
			}
			p.PCI = &a
			p.VendorName, p.DeviceName = names.Vendor(vendor), names.Device(vendor, device)
		}
		if err := readParent(f, &p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// VirtualMdevParents lists the virtual mdev parents (mbochs, mtty): those
// MdevParents lists without PCI. It reads nothing of the PCI parents, so
// its cost follows the virtual ones, not the host's GPUs and VFs.
func VirtualMdevParents(f sysfs.FS) ([]MdevParent, error) {
	parents, err := mdev.Parents(f)
	if err != nil {
		return nil, fmt.Errorf("list mdev parents: %w", err)
	}
	var out []MdevParent
	for _, name := range parents {
		if _, err := pci.ParseAddress(name); err == nil {
			continue
		}
		p := MdevParent{Name: name}
		if err := readParent(f, &p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// VirtualMdevParent reads the virtual mdev parent called name; a PCI
// parent is a GPU (or a VF of one), named by its address. Not finding it
// is an mdev.ErrNoParent that lists the names there are.
func VirtualMdevParent(f sysfs.FS, name string) (MdevParent, error) {
	ps, err := VirtualMdevParents(f)
	if err != nil {
		return MdevParent{}, err
	}
	var names []string
	for _, p := range ps {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return MdevParent{}, fmt.Errorf("%w %q among the virtual mdev parents (%s); a GPU is named by its PCI address",
		mdev.ErrNoParent, name, cmp.Or(strings.Join(names, ", "), "none"))
}

// readParent fills p's Path and Types.
func readParent(f sysfs.FS, p *MdevParent) error {
	var err error
	if p.Path, err = mdev.ParentPath(f, p.Name); err != nil {
		return fmt.Errorf("list mdev parents: %w", err)
	}
	if p.Types, err = mdev.Types(f, p.Name); err != nil {
		return fmt.Errorf("list mdev parents: %w", err)
	}
	return nil
}

// coveredByDiscover: a is a GPU PF, or a VF of one.
func coveredByDiscover(f sysfs.FS, a pci.Address) (bool, error) {
	ok, err := pci.Exists(f, a)
	if err != nil || !ok {
		return false, err
	}
	if pf, isVF, err := sriov.PhysFn(f, a); err != nil {
		return false, err
	} else if isVF {
		a = pf
	}
	_, _, class, err := pci.ReadIDs(f, a)
	if err != nil {
		return false, err
	}
	return IsGPUClass(class), nil
}
