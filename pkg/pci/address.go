package pci

import "github.com/vgpu-project/vgpu/pkg/vgpu"

// Address is a PCI function address: domain:bus:device.function. The type
// is vgpu.PCIAddress, in the leaf of shared nouns, so that a vgpu.Target
// names a GPU by it without linking the kernel operations here.
type Address = vgpu.PCIAddress

// ParseAddress reads an address as sysfs and admins write it (see
// vgpu.ParsePCIAddress).
func ParseAddress(s string) (Address, error) { return vgpu.ParsePCIAddress(s) }

// MustParseAddress is ParseAddress for constants in tests and models.
func MustParseAddress(s string) Address {
	a, err := ParseAddress(s)
	if err != nil {
		panic(err)
	}
	return a
}
