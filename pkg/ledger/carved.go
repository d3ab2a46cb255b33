package ledger

import (
	"time"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

// Carved records that vgpud carved a GPU because the host config named it.
// Reconcile uses it to tell the GPUs it manages from those an admin carved
// by hand: a GPU the config no longer names is uncarved only if it is here.
type Carved struct {
	GPU     pci.Address `json:"gpu"`
	Profile string      `json:"profile"`
	Since   time.Time   `json:"since"`
}

// PutCarved records that gpu carries profile for the config. A record for
// the same profile keeps its Since.
func (t *Tx) PutCarved(gpu pci.Address, profile string) error {
	var old Carved
	ok, err := t.get(bucketCarved, gpu.String(), &old)
	if err != nil || ok && old.Profile == profile {
		return err
	}
	return t.put(bucketCarved, gpu.String(), Carved{GPU: gpu, Profile: profile, Since: t.Now()})
}

// DeleteCarved forgets gpu: it no longer carries a profile for the config.
func (t *Tx) DeleteCarved(gpu pci.Address) error { return t.delete(bucketCarved, gpu.String()) }

// CarvedGPUs returns every GPU vgpud carved for the config, by address.
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

// DeleteCarved forgets gpu.
func (l *Ledger) DeleteCarved(gpu pci.Address) error {
	return l.Update(func(tx *Tx) error { return tx.DeleteCarved(gpu) })
}

// CarvedGPUs returns every GPU vgpud carved for the config.
func (l *Ledger) CarvedGPUs() (out []Carved, err error) {
	err = l.View(func(tx *Tx) error {
		out, err = tx.CarvedGPUs()
		return err
	})
	return out, err
}
