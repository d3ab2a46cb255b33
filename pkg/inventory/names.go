package inventory

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/jaypipes/pcidb"
)

// Where distributions install the pci.ids database: Debian's pci.ids
// package, and Fedora's hwdata.
const (
	DebianPCIIDs = "/usr/share/misc/pci.ids"
	hwdataPCIIDs = "/usr/share/hwdata/pci.ids"
)

// Names turns PCI ids into vendor and device names from a pci.ids file.
// A nil *Names is valid and names everything by its hex id.
type Names struct {
	db *pcidb.DB
}

// LoadNames reads a pci.ids file; path "" means the system's. It never
// fetches from the network: a host without the file gets a clear error
// (install Debian's pci.ids package) and callers may go on with nil Names.
func LoadNames(path string) (*Names, error) {
	if path == "" {
		for _, p := range []string{DebianPCIIDs, hwdataPCIIDs} {
			if _, err := os.Stat(p); err == nil {
				path = p
				break
			}
		}
		if path == "" {
			return nil, fmt.Errorf("load PCI names: no pci.ids at %s or %s (apt-get install pci.ids): %w",
				DebianPCIIDs, hwdataPCIIDs, fs.ErrNotExist)
		}
	}
	// pcidb would fall back to its cache and, if the environment allows,
	// the network; checking first keeps it on this one file.
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("load PCI names from %s: %w", path, err)
	}
	db, err := pcidb.New(pcidb.WithPath(path))
	if err != nil {
		return nil, fmt.Errorf("load PCI names from %s: %w", path, err)
	}
	if len(db.Vendors) == 0 {
		return nil, fmt.Errorf("load PCI names from %s: %w", path, errors.New("no vendors in the file"))
	}
	return &Names{db: db}, nil
}

// Vendor names a vendor id ("NVIDIA Corporation"), or "0x10de" if unknown.
func (n *Names) Vendor(id uint16) string {
	if n != nil && n.db != nil {
		if v, ok := n.db.Vendors[fmt.Sprintf("%04x", id)]; ok && v.Name != "" {
			return v.Name
		}
	}
	return fmt.Sprintf("0x%04x", id)
}

// Device names a device ("TU104GL [Tesla T4]"), or "0x1eb8" if unknown.
func (n *Names) Device(vendor, device uint16) string {
	if n != nil && n.db != nil {
		if p, ok := n.db.Products[fmt.Sprintf("%04x%04x", vendor, device)]; ok && p.Name != "" {
			return p.Name
		}
	}
	return fmt.Sprintf("0x%04x", device)
}
