package ledger

import (
	"time"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
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

// Target is what the record is of: its GPU, or its virtual parent.
func (c Carved) Target() vgpu.Target {
	if c.Parent != "" {
		return vgpu.Parent(c.Parent)
	}
	return vgpu.GPU(c.GPU)
}

// carvedKey keys t's record: a GPU by its address, a virtual parent by
// "parent/" and its name, apart from any address.
func carvedKey(t vgpu.Target) string {
	if t.IsParent() {
		return "parent/" + t.Parent
	}
	return t.GPU.String()
}

// PutCarved records that t (a GPU, or a virtual mdev parent) carries
// profile for the config. A record for the same profile keeps its Since.
func (t *Tx) PutCarved(target vgpu.Target, profile string) error {
	var old Carved
	ok, err := t.get(bucketCarved, carvedKey(target), &old)
	if err != nil || ok && old.Profile == profile {
		return err
	}
	return t.put(bucketCarved, carvedKey(target), Carved{GPU: target.GPU, Parent: target.Parent, Profile: profile, Since: t.Now()})
}

// DeleteCarved forgets t: it no longer carries a profile for the config.
func (t *Tx) DeleteCarved(target vgpu.Target) error { return t.delete(bucketCarved, carvedKey(target)) }

// CarvedGPUs returns every GPU vgpud carved for the config, by address,
// then every virtual mdev parent (Parent set), by name.
func (t *Tx) CarvedGPUs() ([]Carved, error) {
	return records[Carved](t, bucketCarved, nil)
}

// PutCarved records that t carries profile for the config.
func (l *Ledger) PutCarved(t vgpu.Target, profile string) error {
	return l.Update(func(tx *Tx) error { return tx.PutCarved(t, profile) })
}

// DeleteCarved forgets t.
func (l *Ledger) DeleteCarved(t vgpu.Target) error {
	return l.Update(func(tx *Tx) error { return tx.DeleteCarved(t) })
}

// CarvedGPUs returns every GPU and virtual parent vgpud carved for the config.
func (l *Ledger) CarvedGPUs() ([]Carved, error) {
	return viewValue(l, (*Tx).CarvedGPUs)
}
