package ledger

import (
	"time"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

// Carved records that vgpud carved a GPU (or a virtual mdev parent)
// because the host config named it. Reconcile uses it to tell the GPUs it
// manages from those an admin carved by hand: a GPU the config no longer
// names is uncarved only if it is here.
type Carved struct {
	GPU pci.Address `json:"gpu"`
	// Parent names a virtual mdev parent (mbochs); GPU is then zero.
	Parent  string    `json:"parent,omitempty"`
	Profile string    `json:"profile"`
	Since   time.Time `json:"since"`
}

// parentKey keys a virtual parent's record apart from any PCI address.
func parentKey(name string) string { return "parent/" + name }

// PutCarved records that gpu carries profile for the config. A record for
// the same profile keeps its Since.
func (t *Tx) PutCarved(gpu pci.Address, profile string) error {
	return t.putCarved(gpu.String(), Carved{GPU: gpu, Profile: profile})
}

// PutCarvedParent records that the virtual mdev parent carries profile for
// the config.
func (t *Tx) PutCarvedParent(parent, profile string) error {
	return t.putCarved(parentKey(parent), Carved{Parent: parent, Profile: profile})
}

func (t *Tx) putCarved(key string, c Carved) error {
	var old Carved
	ok, err := t.get(bucketCarved, key, &old)
	if err != nil || ok && old.Profile == c.Profile {
		return err
	}
	c.Since = t.Now()
	return t.put(bucketCarved, key, c)
}

// DeleteCarved forgets gpu: it no longer carries a profile for the config.
func (t *Tx) DeleteCarved(gpu pci.Address) error { return t.delete(bucketCarved, gpu.String()) }

// DeleteCarvedParent forgets a virtual mdev parent.
func (t *Tx) DeleteCarvedParent(parent string) error {
	return t.delete(bucketCarved, parentKey(parent))
}

// CarvedGPUs returns every GPU vgpud carved for the config, by address,
// then every virtual mdev parent (Parent set), by name.
func (t *Tx) CarvedGPUs() ([]Carved, error) {
	var out []Carved
	err := each(t, bucketCarved, func(_ []byte, c Carved) error {
		out = append(out, c)
		return nil
	})
	return out, err
}

// PutCarved records that gpu carries profile for the config.
func (l *Ledger) PutCarved(gpu pci.Address, profile string) error {
	return l.Update(func(tx *Tx) error { return tx.PutCarved(gpu, profile) })
}

// PutCarvedParent records that a virtual mdev parent carries profile.
func (l *Ledger) PutCarvedParent(parent, profile string) error {
	return l.Update(func(tx *Tx) error { return tx.PutCarvedParent(parent, profile) })
}

// DeleteCarved forgets gpu.
func (l *Ledger) DeleteCarved(gpu pci.Address) error {
	return l.Update(func(tx *Tx) error { return tx.DeleteCarved(gpu) })
}

// DeleteCarvedParent forgets a virtual mdev parent.
func (l *Ledger) DeleteCarvedParent(parent string) error {
	return l.Update(func(tx *Tx) error { return tx.DeleteCarvedParent(parent) })
}

// CarvedGPUs returns every GPU and virtual parent vgpud carved for the config.
func (l *Ledger) CarvedGPUs() (out []Carved, err error) {
	err = l.View(func(tx *Tx) error {
		out, err = tx.CarvedGPUs()
		return err
	})
	return out, err
}
