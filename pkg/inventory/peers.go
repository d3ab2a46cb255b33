package inventory

import (
	"fmt"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Peer is another PCI function in a GPU's IOMMU group. VFIO hands a VM the
// whole group, so a passthrough moves the GPU's own functions with it.
type Peer struct {
	Address pci.Address `json:"address"`
	Class   uint32      `json:"class"`
	Driver  string      `json:"driver"` // "" unbound
	// Original is the driver the ledger remembers for it before vfio-pci
	// (filled by the carver; "" unknown).
	Original string `json:"original,omitempty"`
}

// Bridge reports a PCI-to-PCI bridge (a root or switch port without ACS).
// It stays on its driver: vfio-pci takes normal headers only, and the
// kernel lets a group hold bridges on pcieport (driver_managed_dma).
func (p Peer) Bridge() bool { return p.Class>>8 == 0x0604 }

// SameCard reports a function of the GPU's own card: same slot, another
// function (HD audio, USB-C, UCSI).
func (p Peer) SameCard(gpu pci.Address) bool {
	return p.Address.Domain == gpu.Domain && p.Address.Bus == gpu.Bus && p.Address.Device == gpu.Device
}

// GroupPeers lists the functions sharing g's IOMMU group, by address,
// leaving out g and its VFs.
func GroupPeers(f sysfs.FS, g GPU) ([]Peer, error) {
	if g.IOMMUGroup < 0 {
		return nil, nil
	}
	addrs, err := pci.GroupDevices(f, g.IOMMUGroup)
	if err != nil {
		return nil, fmt.Errorf("list IOMMU group %d of %s: %w", g.IOMMUGroup, g.Address, err)
	}
	var out []Peer
	for _, a := range addrs {
		if a == g.Address || isVFOf(g, a) {
			continue
		}
		p := Peer{Address: a}
		if _, _, p.Class, err = pci.ReadIDs(f, a); err != nil {
			return nil, err
		}
		if p.Driver, err = pci.CurrentDriver(f, a); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func isVFOf(g GPU, a pci.Address) bool {
	if g.SRIOV == nil {
		return false
	}
	for _, vf := range g.SRIOV.VFs {
		if vf.Address == a {
			return true
		}
	}
	return false
}
