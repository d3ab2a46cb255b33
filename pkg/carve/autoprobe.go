package carve

import (
	"context"
	"errors"
	"fmt"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
)

// A carve turns a PF's sriov_drivers_autoprobe off while its VFs appear
// and puts it back right after. The kernel keeps the setting until the
// next boot, so a crash (a kill -9) in between would leave every VF any
// tool enables later without its driver. The journal records the value
// before it is turned, durably, and the record ends once it is back: a
// record still open names what a repair must put back.

// AutoprobeJournal keeps the records (vgpud's ledger, as intents).
type AutoprobeJournal interface {
	// BeginAutoprobe records, durably, that pf's setting, was, is about to
	// be turned.
	BeginAutoprobe(pf pci.Address, was bool) (id uint64, err error)
	// EndAutoprobe closes record id; closing one already closed is a no-op.
	EndAutoprobe(id uint64) error
	// OpenAutoprobes lists the records not closed, oldest first.
	OpenAutoprobes() ([]sriov.AutoprobeRecord, error)
}

// WithAutoprobeJournal records every turn of a PF's
// sriov_drivers_autoprobe in j before it is made (default: none, and a
// crash between the turn and its undo leaves the setting turned).
func WithAutoprobeJournal(j AutoprobeJournal) Option {
	return func(c *Carver) { c.journal = j }
}

// withAutoprobe runs f with pf's sriov_drivers_autoprobe at want (nil: as
// it is) and puts the setting back after, whether f worked or not. The
// journal's record is open from before the turn until the setting is
// back; when putting it back fails, the record stays for the op's undo
// (OpAutoprobe) or a repair.
func (c *Carver) withAutoprobe(pf pci.Address, want *bool, f func() error) error {
	if want == nil {
		return f()
	}
	was, err := sriov.Autoprobe(c.fs, pf)
	if err != nil {
		return err
	}
	if was == *want {
		return f()
	}
	id, err := c.beginAutoprobe(pf, was)
	if err != nil {
		return err
	}
	if err := sriov.SetAutoprobe(c.fs, pf, *want); err != nil {
		return err
	}
	err = f()
	if rerr := sriov.SetAutoprobe(c.fs, pf, was); rerr != nil {
		return errors.Join(err, rerr)
	}
	return errors.Join(err, c.endAutoprobe(id))
}

func (c *Carver) beginAutoprobe(pf pci.Address, was bool) (uint64, error) {
	if c.journal == nil {
		return 0, nil
	}
	id, err := c.journal.BeginAutoprobe(pf, was)
	if err != nil {
		return 0, fmt.Errorf("record the VF driver autoprobe of %s (%s) before turning it: %w", pf, onOff(was), err)
	}
	return id, nil
}

func (c *Carver) endAutoprobe(id uint64) error {
	if c.journal == nil {
		return nil
	}
	if err := c.journal.EndAutoprobe(id); err != nil {
		return fmt.Errorf("close the record of a VF driver autoprobe put back: %w", err)
	}
	return nil
}

// setAutoprobe is OpAutoprobe, an undo that puts pf's setting back to the
// value it had before the op that turned it: the journal's records of pf
// end with it. The caller holds pf's lock, so none is another change's.
func (c *Carver) setAutoprobe(pf pci.Address, on bool) error {
	if err := sriov.SetAutoprobe(c.fs, pf, on); err != nil {
		return err
	}
	recs, err := c.openAutoprobes(pf)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := c.endAutoprobe(r.ID); err != nil {
			return err
		}
	}
	return nil
}

// openAutoprobes is the journal's open records of pf (of every PF when
// pf is zero), oldest first.
func (c *Carver) openAutoprobes(pf pci.Address) ([]sriov.AutoprobeRecord, error) {
	if c.journal == nil {
		return nil, nil
	}
	all, err := c.journal.OpenAutoprobes()
	if err != nil {
		return nil, fmt.Errorf("read the records of VF driver autoprobe turned: %w", err)
	}
	if pf.IsZero() {
		return all, nil
	}
	var out []sriov.AutoprobeRecord
	for _, r := range all {
		if r.PF == pf {
			out = append(out, r)
		}
	}
	return out, nil
}

// RepairAutoprobe puts back the sriov_drivers_autoprobe of every PF whose
// change was cut short (a crash, a kill) between turning the setting and
// putting it back, as the journal recorded it, and closes those records.
// A PF whose lock another change holds is left to that change, or to the
// next repair. It returns what it put back.
func (c *Carver) RepairAutoprobe(ctx context.Context) ([]string, error) {
	recs, err := c.openAutoprobes(pci.Address{})
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	seen := map[pci.Address]bool{}
	for _, r := range recs {
		if seen[r.PF] {
			continue
		}
		seen[r.PF] = true
		unlock := func() {}
		if c.locks != nil {
			var ok bool
			if unlock, ok, err = c.locks.TryLock(r.PF); err != nil {
				errs = append(errs, err)
				continue
			} else if !ok {
				c.log.Info("VF driver autoprobe left turned while a change of the GPU runs; that change puts it back", "gpu", r.PF)
				continue
			}
		}
		msg, err := c.repairAutoprobeOf(r.PF)
		unlock()
		if err != nil {
			errs = append(errs, err)
		} else if msg != "" {
			done = append(done, msg)
		}
	}
	return done, errors.Join(errs...)
}

// repairAutoprobeOf puts pf's setting back as its oldest open record
// says (the value before the first change cut short) and closes its
// records; "" when it has none. The caller holds pf's lock.
func (c *Carver) repairAutoprobeOf(pf pci.Address) (string, error) {
	recs, err := c.openAutoprobes(pf)
	if err != nil || len(recs) == 0 {
		return "", err
	}
	was := recs[0].Was
	cur, err := sriov.Autoprobe(c.fs, pf)
	var msg string
	switch {
	case errors.Is(err, pci.ErrNoDevice):
		msg = fmt.Sprintf("VF driver autoprobe of %s, turned by a change cut short: the device is gone; record closed", pf)
	case err != nil:
		return "", fmt.Errorf("repair the VF driver autoprobe of %s: %w", pf, err)
	case cur == was:
		msg = fmt.Sprintf("VF driver autoprobe of %s, turned by a change cut short, is %s again; record closed", pf, onOff(was))
	default:
		if err := sriov.SetAutoprobe(c.fs, pf, was); err != nil {
			return "", fmt.Errorf("repair the VF driver autoprobe of %s: %w", pf, err)
		}
		msg = fmt.Sprintf("VF driver autoprobe of %s was left %s by a change cut short: put back %s", pf, onOff(cur), onOff(was))
	}
	for _, r := range recs {
		if err := c.endAutoprobe(r.ID); err != nil {
			return "", err
		}
	}
	c.log.Warn("repaired", "what", msg)
	return msg, nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
