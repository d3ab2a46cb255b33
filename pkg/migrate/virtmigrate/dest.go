//go:build cgo

package virtmigrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/migrate"
	"github.com/vgpu-project/vgpu/pkg/virt"
)

// virtDest is migrate.Dest over libvirt.
type virtDest struct {
	conn       *virt.Conn
	uuid, name string
}

func (t *virtDest) Running() (bool, error) {
	d, err := t.conn.LookupDomain(t.uuid)
	if errors.Is(err, virt.ErrNoDomain) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer d.Close()
	return d.Active()
}

// Finish points the destination's persistent definition at the vGPUs the
// domain runs with there (the hook rewrote only the live one): a later
// start must get the destination's vGPUs, never whatever sits at the
// source's addresses (CVE-2020-17376). It returns the completed job.
func (t *virtDest) Finish(context.Context) (migrate.Completed, error) {
	d, err := t.conn.LookupDomain(t.uuid)
	if err != nil {
		return migrate.Completed{}, err
	}
	defer d.Close()
	var c migrate.Completed
	if j, err := d.Job(true); err == nil {
		c = migrate.Completed{Downtime: j.Downtime, RAMBytes: j.Processed, Iterations: j.Iteration,
			DeviceBytes: j.Device, DeviceSet: j.DeviceSet, IterateSet: j.Iteration > 0}
	}
	if persistent, err := d.Persistent(); err != nil || !persistent {
		return c, err
	}
	return c, fixPersistent(d)
}

// fixPersistent rewrites the persistent definition's vGPU sources to the
// live ones, by request index.
func fixPersistent(d *virt.Domain) error {
	live, err := d.XML(virt.Live)
	if err != nil {
		return err
	}
	cfg, err := d.XML(virt.Config)
	if err != nil {
		return err
	}
	ld, err := domxml.Parse(live)
	if err != nil {
		return fmt.Errorf("read the live XML of %s on the destination: %w", d.Name(), err)
	}
	cd, err := domxml.Parse(cfg)
	if err != nil {
		return fmt.Errorf("read the persistent XML of %s on the destination: %w", d.Name(), err)
	}
	if ld.Request == nil || cd.Request == nil {
		return nil
	}
	moves := map[string]domxml.VGPU{}
	for _, v := range cd.Request.VGPUs {
		for _, lv := range ld.Request.VGPUs {
			if lv.Index == v.Index && lv.ID() != v.ID() {
				moves[v.ID()] = lv
			}
		}
	}
	if len(moves) == 0 {
		return nil
	}
	out, err := domxml.Rewrite(cfg, moves)
	if err != nil {
		return fmt.Errorf("point the persistent definition of %s at the destination's vGPUs: %w", d.Name(), err)
	}
	_, err = d.Conn().Define(out)
	return err
}
