package ledger

import (
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// RememberDriver implements carve.DriverStore: the first driver recorded
// for addr is kept, since only it is the device's own; later calls (a
// carve repeated after a crash, with the device already on vfio-pci) must
// not overwrite it.
func (l *Ledger) RememberDriver(addr pci.Address, driver string) error {
	return l.Update(func(tx *Tx) error {
		var old string
		if ok, err := tx.get(bucketDrivers, addr.String(), &old); err != nil || ok {
			return err
		}
		return tx.put(bucketDrivers, addr.String(), driver)
	})
}

// OriginalDriver implements carve.DriverStore.
func (l *Ledger) OriginalDriver(addr pci.Address) (string, bool, error) {
	return viewLookup(l, func(tx *Tx) (driver string, ok bool, err error) {
		ok, err = tx.get(bucketDrivers, addr.String(), &driver)
		return driver, ok, err
	})
}

// ForgetDriver implements carve.DriverStore.
func (l *Ledger) ForgetDriver(addr pci.Address) error {
	return l.Update(func(tx *Tx) error { return tx.delete(bucketDrivers, addr.String()) })
}
