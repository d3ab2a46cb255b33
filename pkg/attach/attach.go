package attach

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-project/vgpu/internal/revert"
	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
	"github.com/vgpu-project/vgpu/pkg/virt"
)

// Domain is what attach and detach need of a libvirt domain; *virt.Domain
// is the one, tests may wrap it to inject failures.
type Domain interface {
	Name() string
	UUID() string
	URI() string
	Active() (bool, error)
	Persistent() (bool, error)
	XML(virt.Affect) ([]byte, error)
	Attach([]domxml.VGPU, virt.Affect) error
	Detach([]domxml.VGPU, virt.Affect) error
	SetRequest(*domxml.Request, virt.Affect) error
	// SetMigration writes the vGPUs' QEMU migration overrides into the
	// persistent definition (nil props: drop them).
	SetMigration(*domxml.Request, []libvirtxml.DomainQEMUOverrideProperty) error
}

// MigrationProps are the QEMU properties that let the vGPUs of profile
// migrate; ok is false when the catalog does not know it or its vendor
// driver does not migrate.
func MigrationProps(cat *profile.Catalog, name string) ([]libvirtxml.DomainQEMUOverrideProperty, bool) {
	if cat == nil {
		return nil, false
	}
	p, ok := cat.Get(name)
	if !ok || p.Model.Migration == nil {
		return nil, false
	}
	return domxml.MigrationProps(p.Model.Migration.DirtyTracking), true
}

// KindOf is the kind of vGPU a dialect hands to a VM (docs/profiles.md,
// "Dialects and their splits").
func KindOf(d inventory.Dialect) vgpu.Kind {
	switch d {
	case inventory.DialectMdev, inventory.DialectSRIOVMdev:
		return vgpu.KindMdev
	case inventory.DialectNVIDIAVF:
		return vgpu.KindNVIDIAVF
	case inventory.DialectPassthrough:
		return vgpu.KindPF
	}
	return vgpu.KindVF
}

// NormaliseID accepts a vGPU id as a user types it: a PCI address (short
// or long, any case) or an mdev UUID (any case).
func NormaliseID(s string) (string, error) {
	if u, err := uuid.Parse(s); err == nil && len(s) == 36 {
		return u.String(), nil
	}
	a, err := pci.ParseAddress(s)
	if err != nil {
		return "", fmt.Errorf("vGPU %q is neither a PCI address (0000:03:00.2) nor an mdev UUID", s)
	}
	return a.String(), nil
}

// Spec is one attach, checked against the catalog.
type Spec struct {
	Profile string
	Kind    vgpu.Kind // what the profile gives a VM
	Count   int
	Affect  virt.Affect
	// Migration: the QEMU properties that let the profile's vGPUs migrate
	// (nil: its vendor driver does not migrate them).
	Migration []libvirtxml.DomainQEMUOverrideProperty
}

// Change is what attach or detach did, for the user.
type Change struct {
	Verb    string          `json:"-"`
	Domain  string          `json:"domain"`
	UUID    string          `json:"uuid"`
	Affect  string          `json:"affect"`
	Profile string          `json:"profile"`
	Changed []domxml.VGPU   `json:"changed"` // attached or detached
	Request *domxml.Request `json:"request"` // after the change; nil: none left
	// Released are the reservations vgpud gave back (detach).
	Released []string `json:"released,omitempty"`
	// Kept are detached vGPUs still reserved: the definition the detach
	// did not change uses them.
	Kept []string `json:"kept,omitempty"`
}

// Attach adds spec.Count vGPUs to d, all or nothing: each step that
// fails undoes the ones before it. When an undo fails too, the error
// matches ErrUndo.
func Attach(ctx context.Context, d Domain, res Reserver, spec Spec) (Change, error) {
	ch, err := attach(ctx, d, res, spec)
	if failed := (revert.Failed)(nil); errors.As(err, &failed) {
		err = marked{fmt.Errorf("%w (left partly done: vgpuctl detach %s VGPU releases a vGPU named here; virsh edit %s removes a hostdev left in the definition)",
			err, d.Name(), d.Name()), ErrUndo}
	}
	return ch, err
}

func attach(ctx context.Context, d Domain, res Reserver, spec Spec) (Change, error) {
	ch := Change{Verb: "attached", Domain: d.Name(), UUID: d.UUID(), Affect: spec.Affect.String(), Profile: spec.Profile}
	if spec.Kind == vgpu.KindMdev && spec.Affect&virt.Live != 0 {
		return ch, badInput("--live: profile %s gives %s an mdev, which vgpud creates when the domain starts; attach with --config and restart %s",
			spec.Profile, d.Name(), d.Name())
	}
	cur, err := currentRequest(d, spec.Affect)
	if err != nil {
		return ch, err
	}
	if cur == nil {
		cur = &domxml.Request{Profile: spec.Profile}
	}
	if cur.Profile != spec.Profile {
		return ch, badInput("%s has %d x %s already; a domain holds vGPUs of one profile (vgpuctl detach %s first)",
			d.Name(), len(cur.VGPUs), cur.Profile, d.Name())
	}
	total := len(cur.VGPUs) + spec.Count
	if total > domxml.MaxCount {
		return ch, badInput("%s would hold %d vGPUs; at most %d", d.Name(), total, domxml.MaxCount)
	}

	var added []domxml.VGPU
	var undo revert.List
	if spec.Kind == vgpu.KindMdev {
		for _, i := range cur.FreeIndices(spec.Count) {
			v, err := domxml.MdevVGPU(d.UUID(), i)
			if err != nil {
				return ch, err
			}
			added = append(added, v)
		}
	} else {
		var reserved []string
		added, reserved, err = reserve(ctx, d, res, cur, spec, total)
		if err != nil {
			return ch, err
		}
		releaseOnUndo(ctx, &undo, res, d, reserved)
		active, err := d.Active()
		if err != nil {
			return ch, undo.Fail(err)
		}
		others, err := usedOutside(d, spec.Affect, active)
		if err != nil {
			return ch, undo.Fail(err)
		}
		// A VF the other definition uses (detached from this one only) is
		// vgpud's to keep whatever happens here: the undo releases the rest.
		if kept := slices.DeleteFunc(slices.Clone(reserved), func(id string) bool { return others[id] }); len(kept) < len(reserved) {
			undo.Success()
			releaseOnUndo(ctx, &undo, res, d, kept)
		}
		// A hotplug gets what a start gets from the hook: ready, attached.
		if active && spec.Affect&virt.Live != 0 {
			var ids []string
			for _, v := range added {
				ids = append(ids, v.ID())
			}
			if err := res.Prepare(ctx, d.UUID(), d.Name(), spec.Profile, ids); err != nil {
				return ch, undo.Fail(fmt.Errorf("prepare %s for %s in vgpud: %w", strings.Join(ids, ", "), d.Name(), err))
			}
		}
	}
	if err := d.Attach(added, spec.Affect); err != nil {
		// A prepared VF the VM never got is not in use: releasing frees it.
		return ch, undo.Fail(err)
	}
	undo.Add("detaching the new hostdevs", func() error { return d.Detach(added, spec.Affect) })
	next := domxml.Request{Profile: spec.Profile, Count: total, VGPUs: append(slices.Clone(cur.VGPUs), added...)}
	if err := d.SetRequest(&next, spec.Affect); err != nil {
		return ch, undo.Fail(err)
	}
	undo.Success()
	if spec.Migration != nil && spec.Affect&virt.Config != 0 {
		if err := d.SetMigration(&next, spec.Migration); err != nil {
			err = fmt.Errorf("%w (the vGPUs are attached, but will not migrate; run vgpuctl detach %s, then attach again)", err, d.Name())
			return ch, err
		}
	}
	ch.Changed, ch.Request = added, &next
	return ch, nil
}

// releaseOnUndo adds to undo giving d's reservations ids back to vgpud
// (nothing when there are none).
func releaseOnUndo(ctx context.Context, undo *revert.List, res Reserver, d Domain, ids []string) {
	if len(ids) == 0 {
		return
	}
	undo.Add(fmt.Sprintf("releasing %s in vgpud", strings.Join(ids, ", ")), func() error {
		_, err := res.Release(ctx, d.UUID(), ids)
		return err
	})
}

// reserve asks vgpud for the VFs of the new vGPUs. It returns them with
// their ids, to give back if the attach fails later.
func reserve(ctx context.Context, d Domain, res Reserver, cur *domxml.Request, spec Spec, total int) ([]domxml.VGPU, []string, error) {
	why := fmt.Sprintf("profile %s gives %s a %s, whose address vgpud must reserve", spec.Profile, d.Name(), spec.Kind)
	if res == nil {
		return nil, nil, fmt.Errorf("%s, and vgpud is not running (start it: systemctl start vgpud)", why)
	}
	got, err := res.Reserve(ctx, d.UUID(), d.Name(), spec.Profile, total)
	if err != nil {
		return nil, nil, fmt.Errorf("reserve %d x %s for %s in vgpud: %w (%s)", spec.Count, spec.Profile, d.Name(), err, why)
	}
	var fresh []Reserved // what the domain's XML does not name yet
	var ids []string
	for _, r := range got {
		if !cur.Has(r.ID) {
			fresh = append(fresh, r)
			ids = append(ids, r.ID)
		}
	}
	var undo revert.List
	releaseOnUndo(ctx, &undo, res, d, ids)
	fail := func(err error) ([]domxml.VGPU, []string, error) {
		return nil, nil, undo.Fail(err)
	}
	if len(fresh) < spec.Count {
		return fail(fmt.Errorf("vgpud reserved %d new vGPUs of %s for %s; want %d", len(fresh), spec.Profile, d.Name(), spec.Count))
	}
	var out []domxml.VGPU
	for i, idx := range cur.FreeIndices(spec.Count) {
		r := fresh[i]
		if r.Kind == vgpu.KindMdev || r.Address.String() != r.ID {
			return fail(fmt.Errorf("vgpud reserved %s (%s) for profile %s, which needs a PCI function", r.ID, r.Kind, spec.Profile))
		}
		out = append(out, domxml.PCIVGPU(idx, r.Kind, r.Address))
	}
	// More than asked means vgpud forgot what the domain holds: do not
	// leave the surplus reserved for nothing.
	if surplus := ids[spec.Count:]; len(surplus) > 0 {
		if _, err := res.Release(ctx, d.UUID(), surplus); err != nil {
			return fail(fmt.Errorf("release the surplus %s in vgpud: %w", strings.Join(surplus, ", "), err))
		}
	}
	undo.Success()
	return out, ids[:spec.Count], nil
}

// currentRequest is the request of the definitions affect names; when it
// names both, they must agree.
func currentRequest(d Domain, affect virt.Affect) (*domxml.Request, error) {
	var reqs []*domxml.Request
	for _, which := range []virt.Affect{virt.Config, virt.Live} {
		if affect&which == 0 {
			continue
		}
		if which == virt.Live {
			active, err := d.Active()
			if err != nil {
				return nil, err
			}
			if !active {
				return nil, badInput("--live: %s is not running; change its config (the default) instead", d.Name())
			}
		}
		dd, err := parseDomain(d, which)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, dd.Request)
	}
	if len(reqs) == 2 && !sameRequest(reqs[0], reqs[1]) {
		return nil, badInput("the config and the running definition of %s have different vGPUs; change one at a time (--config or --live)", d.Name())
	}
	return reqs[0], nil
}

func parseDomain(d Domain, which virt.Affect) (domxml.Domain, error) {
	x, err := d.XML(which)
	if err != nil {
		return domxml.Domain{}, err
	}
	dd, err := domxml.Parse(x)
	if err != nil {
		return dd, fmt.Errorf("read the %s XML of %s on %s: %w", which, d.Name(), d.URI(), err)
	}
	return dd, nil
}

func sameRequest(a, b *domxml.Request) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// DetachSpec is one detach: IDs (canonical, see NormaliseID) or, when
// empty, all.
type DetachSpec struct {
	IDs    []string
	Affect virt.Affect
	// Catalog says whether the domain's profile migrates: the vGPUs that
	// stay keep their overrides, the detached ones' go (nil: not touched).
	Catalog *profile.Catalog
}

// Detach removes vGPUs from d and releases in vgpud those no
// definition of d uses any more.
func Detach(ctx context.Context, d Domain, res Reserver, spec DetachSpec) (Change, error) {
	ch := Change{Verb: "detached", Domain: d.Name(), UUID: d.UUID(), Affect: spec.Affect.String()}
	cur, err := currentRequest(d, spec.Affect)
	if err != nil {
		return ch, err
	}
	// Ids no longer in the request are a retry of a release that failed.
	var sel []domxml.VGPU
	var retry []string
	if cur != nil {
		ch.Profile, ch.Request = cur.Profile, cur
		for _, v := range cur.VGPUs {
			if len(spec.IDs) == 0 || slices.Contains(spec.IDs, v.ID()) {
				sel = append(sel, v)
			}
		}
	}
	for _, id := range spec.IDs {
		if cur == nil || !cur.Has(id) {
			retry = append(retry, id)
		}
	}
	if len(sel) == 0 && len(retry) == 0 {
		return ch, nil
	}

	// What no definition will use after the change needs releasing; with
	// no vgpud to do it, change nothing.
	active, err := d.Active()
	if err != nil {
		return ch, err
	}
	others, err := usedOutside(d, spec.Affect, active)
	if err != nil {
		return ch, err
	}
	// toRelease must be released; an mdev of a stopped domain is held by
	// vgpud only under on-release: keep, so it is released when vgpud runs
	// and needs nothing when it does not.
	var toRelease, mdevs []string
	for _, v := range sel {
		switch {
		case others[v.ID()]:
			ch.Kept = append(ch.Kept, v.ID())
		case v.IsPCI() || active:
			toRelease = append(toRelease, v.ID())
		default:
			mdevs = append(mdevs, v.ID())
		}
	}
	for _, id := range retry {
		if res == nil {
			return ch, badInput("%s has no vGPU %s (it has: %s)", d.Name(), id, idList(cur))
		}
		if others[id] {
			return ch, badInput("%s is still used by %s; detach it from there first (--live or --config)", id, d.Name())
		}
		toRelease = append(toRelease, id)
	}
	if len(toRelease) > 0 && res == nil {
		return ch, fmt.Errorf("detaching %s from %s frees it in vgpud's ledger, and vgpud is not running (start it: systemctl start vgpud); nothing changed",
			strings.Join(toRelease, ", "), d.Name())
	}
	if res != nil {
		toRelease = append(toRelease, mdevs...)
	}

	if len(sel) > 0 {
		if err := d.Detach(sel, spec.Affect); err != nil {
			return ch, err
		}
		var ids []string
		for _, v := range sel {
			ids = append(ids, v.ID())
		}
		next, ok := cur.Remove(ids...)
		ch.Request = nil
		if ok {
			ch.Request = &next
		}
		if err := d.SetRequest(ch.Request, spec.Affect); err != nil {
			return ch, fmt.Errorf("%w (the hostdevs are detached; run the same command again to finish)", err)
		}
		if props, ok := MigrationProps(spec.Catalog, cur.Profile); ok && spec.Affect&virt.Config != 0 {
			// The detached vGPUs' overrides go: QEMU would find no device for them.
			if err := d.SetMigration(ch.Request, props); err != nil {
				return ch, fmt.Errorf("%w (the hostdevs are detached; run the same command again to finish)", err)
			}
		}
		ch.Changed = sel
	}
	if len(toRelease) > 0 {
		released, err := res.Release(ctx, d.UUID(), toRelease)
		if err != nil {
			return ch, fmt.Errorf("detached from %s, but vgpud did not release %s: %w; run vgpuctl detach %s %s again",
				d.Name(), strings.Join(toRelease, ", "), err, d.Name(), strings.Join(toRelease, " "))
		}
		// In the order of the command, whatever vgpud's.
		ch.Released = slices.DeleteFunc(slices.Clone(toRelease), func(id string) bool { return !slices.Contains(released, id) })
		// A retry for an id the domain does not have and vgpud does not
		// hold for it was a wrong id, not a release to finish.
		var unknown []string
		for _, id := range retry {
			if !slices.Contains(released, id) {
				unknown = append(unknown, id)
			}
		}
		if len(unknown) > 0 {
			return ch, badInput("%s has no vGPU %s and vgpud holds none such for it (it has: %s)", d.Name(), strings.Join(unknown, ", "), idList(cur))
		}
	}
	return ch, nil
}

func idList(r *domxml.Request) string {
	if r == nil || len(r.VGPUs) == 0 {
		return "none"
	}
	var ids []string
	for _, v := range r.VGPUs {
		ids = append(ids, v.ID())
	}
	return strings.Join(ids, ", ")
}

// usedOutside lists the vGPU ids the definitions of d that affect does not
// change use (request or hostdev): those stay reserved.
func usedOutside(d Domain, affect virt.Affect, active bool) (map[string]bool, error) {
	used := map[string]bool{}
	persistent, err := d.Persistent()
	if err != nil {
		return nil, err
	}
	var others []virt.Affect
	if affect&virt.Config == 0 && persistent {
		others = append(others, virt.Config)
	}
	if affect&virt.Live == 0 && active {
		others = append(others, virt.Live)
	}
	for _, which := range others {
		dd, err := parseDomain(d, which)
		if err != nil {
			return nil, err
		}
		if dd.Request != nil {
			for _, v := range dd.Request.VGPUs {
				used[v.ID()] = true
			}
		}
	}
	return used, nil
}
