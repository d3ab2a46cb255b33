package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
	"github.com/vgpu-project/vgpu/pkg/virt"
)

// Reserver is what attach and detach ask of vgpud: reservations in its
// ledger of the vGPUs a domain's hostdevs name. A VF-based vGPU (vf,
// nvidia-vf, pf) needs one at attach, for its hostdev carries the VF's
// address; an mdev does not, for its UUID derives from the domain and
// vgpud creates it at VM start. A nil Reserver is a host without vgpud.
type Reserver interface {
	// Reserve makes the domain hold count vGPUs of profile in total, what
	// it holds already included (asking again returns the same ones), and
	// returns all of them.
	Reserve(ctx context.Context, domainUUID, domainName, profile string, count int) ([]Reserved, error)
	// Release gives these reservations of the domain back to the pool and
	// returns the ids it held; an id it does not hold is not an error.
	Release(ctx context.Context, domainUUID string, ids []string) (released []string, err error)
	// Prepare makes the domain's reserved ids ready for its running VM (a
	// VF on vfio-pci, an NVIDIA type written) and marks them attached, as
	// the hook's prepare does at start: attach --live hotplugs them next.
	Prepare(ctx context.Context, domainUUID, domainName, profile string, ids []string) error
}

// Reserved is one vGPU vgpud holds for a domain.
type Reserved struct {
	ID      string      `json:"id"`
	Kind    vgpu.Kind   `json:"kind"`
	Address pci.Address `json:"address,omitzero"` // vf, nvidia-vf, pf
	UUID    string      `json:"uuid,omitempty"`   // mdev
}

// domainAPI is what attach and detach need of a libvirt domain; *virt.Domain
// is the one (libvirt_cgo.go), tests may wrap it to inject failures.
type domainAPI interface {
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

// domainFlags are the flags attach and detach share with virsh.
type domainFlags struct {
	uri          string
	live, config bool
}

func (f *domainFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVarP(&f.uri, "connect", "c", "", "libvirt URI, as virsh -c (default: $LIBVIRT_DEFAULT_URI, else "+virt.DefaultURI+" as root)")
	fl.BoolVar(&f.config, "config", false, "change the persistent definition (the default)")
	fl.BoolVar(&f.live, "live", false, "change the running domain (hotplug); with --config, both")
}

func (f *domainFlags) affect() virt.Affect {
	a := virt.Affect(0)
	if f.config || !f.live {
		a |= virt.Config
	}
	if f.live {
		a |= virt.Live
	}
	return a
}

func newAttachCmd(g *globals) *cobra.Command {
	var df domainFlags
	var spec attachSpec
	cmd := &cobra.Command{
		Use:   "attach DOMAIN --profile PROFILE [--count N]",
		Short: "Give a libvirt domain vGPUs of a profile",
		Long: `Add COUNT vGPUs of PROFILE to the libvirt domain DOMAIN (a name or UUID): a
hostdev for each, and a vgpu request element in the domain's metadata that
the vgpu hook reads at every start, stop, migration and restore.

A profile whose vGPUs are mediated devices (NVIDIA GRID, A100, Intel GVT-g)
gets a hostdev with an mdev UUID derived from the domain's UUID; vgpud creates
that mdev when the domain starts. A profile whose vGPUs are VFs or whole GPUs
(AMD MxGPU, NVIDIA per-VF vGPU, passthrough) gets the address of a VF that
vgpud reserves for the domain now, so vgpud must be running.

As virsh attach-device: the persistent definition changes by default, --live
changes the running domain (a VF only: an mdev is made at start), and both
flags change both. A --live attach has vgpud make the VFs ready first and
gives them back when libvirt refuses the hotplug. A domain holds vGPUs of one
profile; attaching again adds more of it. For a profile whose vendor driver
migrates, the definition also gets what QEMU needs to migrate the vGPU.`,
		Example: `  vgpuctl attach web01 --profile mi25-4g
  vgpuctl attach web01 --profile passthrough
  vgpuctl attach web01 --profile t4-4q --count 2 -c qemu+ssh://host2/system
  vgpuctl attach web01 --profile l40s-12q --live --config`,
		Args: exactArgs(1, "DOMAIN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if spec.profile == "" {
				return usage("--profile is required; see vgpuctl profiles")
			}
			if spec.count < 1 || spec.count > domxml.MaxCount {
				return usage("--count %d: want 1 to %d", spec.count, domxml.MaxCount)
			}
			cat, err := g.catalog()
			if err != nil {
				return err
			}
			p, ok := cat.Get(spec.profile)
			if !ok {
				return usageError{fmt.Errorf("%w %q; see vgpuctl profiles", profile.ErrUnknownProfile, spec.profile)}
			}
			spec.kind = kindOf(p.Model.Dialect)
			spec.affect = df.affect()
			spec.migration, _ = migrationProps(cat, spec.profile)
			return g.withDomain(&df, args[0], func(d domainAPI) error {
				res, err := attachVGPUs(cmd.Context(), d, g.reservations(cmd.Context()), spec)
				if err != nil {
					return err
				}
				return printChange(cmd.OutOrStdout(), g, res)
			})
		},
	}
	df.add(cmd)
	cmd.Flags().StringVarP(&spec.profile, "profile", "p", "", "profile of the vGPUs (see vgpuctl profiles)")
	cmd.Flags().IntVarP(&spec.count, "count", "n", 1, "how many vGPUs to add")
	_ = cmd.RegisterFlagCompletionFunc("profile", g.completeProfiles)
	return cmd
}

func newDetachCmd(g *globals) *cobra.Command {
	var df domainFlags
	cmd := &cobra.Command{
		Use:   "detach DOMAIN [VGPU]...",
		Short: "Take vGPUs away from a libvirt domain",
		Long: `Remove from the libvirt domain DOMAIN the hostdevs of the given vGPUs (PCI
addresses or mdev UUIDs, as vgpuctl attach printed them), or of all its vGPUs,
and update its vgpu request element; the element goes with the last vGPU.

vgpud's reservation of a vGPU is released once neither the persistent nor the
running definition uses it. A VF still used by the running domain stays
reserved until the domain stops; run the same detach again then to release it.

--config (the default) and --live work as for vgpuctl attach.`,
		Example: `  vgpuctl detach web01
  vgpuctl detach web01 0000:03:00.2 --live --config`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usage("%s takes a DOMAIN and optionally vGPUs; see %s --help", cmd.CommandPath(), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			spec := detachSpec{affect: df.affect()}
			cat, err := g.catalog()
			if err != nil {
				return err
			}
			// The profile is the domain's; its catalog entry says whether
			// the remaining vGPUs keep migration overrides.
			spec.catalog = cat
			for _, id := range args[1:] {
				n, err := normaliseID(id)
				if err != nil {
					return usageError{err}
				}
				spec.ids = append(spec.ids, n)
			}
			return g.withDomain(&df, args[0], func(d domainAPI) error {
				res, err := detachVGPUs(cmd.Context(), d, g.reservations(cmd.Context()), spec)
				if perr := printChange(cmd.OutOrStdout(), g, res); perr != nil && err == nil {
					err = perr
				}
				return err
			})
		},
	}
	df.add(cmd)
	return cmd
}

// migrationProps are the QEMU properties that let the vGPUs of profile
// migrate; ok is false when the catalog does not know it or its vendor
// driver does not migrate.
func migrationProps(cat *profile.Catalog, name string) ([]libvirtxml.DomainQEMUOverrideProperty, bool) {
	if cat == nil {
		return nil, false
	}
	p, ok := cat.Get(name)
	if !ok || p.Model.Migration == nil {
		return nil, false
	}
	return domxml.MigrationProps(p.Model.Migration.DirtyTracking), true
}

// kindOf is the kind of vGPU a dialect hands to a VM (DESIGN.md's table).
func kindOf(d inventory.Dialect) vgpu.Kind {
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

// normaliseID accepts a vGPU id as a user types it: a PCI address (short
// or long, any case) or an mdev UUID (any case).
func normaliseID(s string) (string, error) {
	if u, err := uuid.Parse(s); err == nil && len(s) == 36 {
		return u.String(), nil
	}
	a, err := pci.ParseAddress(s)
	if err != nil {
		return "", fmt.Errorf("vGPU %q is neither a PCI address (0000:03:00.2) nor an mdev UUID", s)
	}
	return a.String(), nil
}

func (g *globals) completeProfiles(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	cat, err := g.catalog()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, p := range cat.Profiles() {
		names = append(names, p.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// attachSpec is one vgpuctl attach, checked against the catalog.
type attachSpec struct {
	profile string
	kind    vgpu.Kind // what the profile gives a VM
	count   int
	affect  virt.Affect
	// migration: the QEMU properties that let the profile's vGPUs migrate
	// (nil: its vendor driver does not migrate them).
	migration []libvirtxml.DomainQEMUOverrideProperty
}

// change is what attach or detach did, for the user.
type change struct {
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

// attachVGPUs adds spec.count vGPUs to d, all or nothing: each step that
// fails undoes the ones before it.
func attachVGPUs(ctx context.Context, d domainAPI, res Reserver, spec attachSpec) (change, error) {
	ch := change{Verb: "attached", Domain: d.Name(), UUID: d.UUID(), Affect: spec.affect.String(), Profile: spec.profile}
	if spec.kind == vgpu.KindMdev && spec.affect&virt.Live != 0 {
		return ch, usage("--live: profile %s gives %s an mdev, which vgpud creates when the domain starts; attach with --config and restart %s",
			spec.profile, d.Name(), d.Name())
	}
	cur, err := currentRequest(d, spec.affect)
	if err != nil {
		return ch, err
	}
	if cur == nil {
		cur = &domxml.Request{Profile: spec.profile}
	}
	if cur.Profile != spec.profile {
		return ch, usage("%s has %d x %s already; a domain holds vGPUs of one profile (vgpuctl detach %s first)",
			d.Name(), len(cur.VGPUs), cur.Profile, d.Name())
	}
	total := len(cur.VGPUs) + spec.count
	if total > domxml.MaxCount {
		return ch, usage("%s would hold %d vGPUs; at most %d", d.Name(), total, domxml.MaxCount)
	}

	var added []domxml.VGPU
	var reserved []string // to give back if a later step fails
	if spec.kind == vgpu.KindMdev {
		for _, i := range cur.FreeIndices(spec.count) {
			v, err := domxml.MdevVGPU(d.UUID(), i)
			if err != nil {
				return ch, err
			}
			added = append(added, v)
		}
	} else {
		added, reserved, err = reserve(ctx, d, res, cur, spec, total)
		if err != nil {
			return ch, err
		}
		// A VF the other definition uses (detached from this one only) is
		// vgpud's to keep whatever happens here.
		active, err := d.Active()
		if err != nil {
			return ch, release(ctx, res, d, reserved, err)
		}
		others, err := usedOutside(d, spec.affect, active)
		if err != nil {
			return ch, release(ctx, res, d, reserved, err)
		}
		reserved = slices.DeleteFunc(reserved, func(id string) bool { return others[id] })
		// A hotplug gets what a start gets from the hook: ready, attached.
		if active && spec.affect&virt.Live != 0 {
			var ids []string
			for _, v := range added {
				ids = append(ids, v.ID())
			}
			if err := res.Prepare(ctx, d.UUID(), d.Name(), spec.profile, ids); err != nil {
				return ch, release(ctx, res, d, reserved, fmt.Errorf("prepare %s for %s in vgpud: %w", strings.Join(ids, ", "), d.Name(), err))
			}
		}
	}
	if err := d.Attach(added, spec.affect); err != nil {
		// A prepared VF the VM never got is not in use: releasing frees it.
		return ch, release(ctx, res, d, reserved, err)
	}
	next := domxml.Request{Profile: spec.profile, Count: total, VGPUs: append(slices.Clone(cur.VGPUs), added...)}
	if err := d.SetRequest(&next, spec.affect); err != nil {
		if derr := d.Detach(added, spec.affect); derr != nil {
			err = fmt.Errorf("%w; detaching the new hostdevs failed too: %w", err, derr)
		}
		return ch, release(ctx, res, d, reserved, err)
	}
	if spec.migration != nil && spec.affect&virt.Config != 0 {
		if err := d.SetMigration(&next, spec.migration); err != nil {
			err = fmt.Errorf("%w (the vGPUs are attached, but will not migrate; run vgpuctl detach %s, then attach again)", err, d.Name())
			return ch, err
		}
	}
	ch.Changed, ch.Request = added, &next
	return ch, nil
}

// release gives back the reservations of a failed attach and returns its
// cause, with the release's own failure if any.
func release(ctx context.Context, res Reserver, d domainAPI, ids []string, cause error) error {
	if len(ids) == 0 {
		return cause
	}
	if _, err := res.Release(ctx, d.UUID(), ids); err != nil {
		return fmt.Errorf("%w; releasing %s in vgpud failed too: %w", cause, strings.Join(ids, ", "), err)
	}
	return cause
}

// reserve asks vgpud for the VFs of the new vGPUs. It returns them with
// their ids, to give back if the attach fails later.
func reserve(ctx context.Context, d domainAPI, res Reserver, cur *domxml.Request, spec attachSpec, total int) ([]domxml.VGPU, []string, error) {
	why := fmt.Sprintf("profile %s gives %s a %s, whose address vgpud must reserve", spec.profile, d.Name(), spec.kind)
	if res == nil {
		return nil, nil, fmt.Errorf("%s, and vgpud is not running (start it: systemctl start vgpud)", why)
	}
	got, err := res.Reserve(ctx, d.UUID(), d.Name(), spec.profile, total)
	if err != nil {
		return nil, nil, fmt.Errorf("reserve %d x %s for %s in vgpud: %w (%s)", spec.count, spec.profile, d.Name(), err, why)
	}
	var fresh []Reserved // what the domain's XML does not name yet
	var ids []string
	for _, r := range got {
		if !cur.Has(r.ID) {
			fresh = append(fresh, r)
			ids = append(ids, r.ID)
		}
	}
	fail := func(err error) ([]domxml.VGPU, []string, error) {
		return nil, nil, release(ctx, res, d, ids, err)
	}
	if len(fresh) < spec.count {
		return fail(fmt.Errorf("vgpud reserved %d new vGPUs of %s for %s; want %d", len(fresh), spec.profile, d.Name(), spec.count))
	}
	var out []domxml.VGPU
	for i, idx := range cur.FreeIndices(spec.count) {
		r := fresh[i]
		if r.Kind == vgpu.KindMdev || r.Address.String() != r.ID {
			return fail(fmt.Errorf("vgpud reserved %s (%s) for profile %s, which needs a PCI function", r.ID, r.Kind, spec.profile))
		}
		out = append(out, domxml.PCIVGPU(idx, r.Kind, r.Address))
	}
	// More than asked means vgpud forgot what the domain holds: do not
	// leave the surplus reserved for nothing.
	if surplus := ids[spec.count:]; len(surplus) > 0 {
		if _, err := res.Release(ctx, d.UUID(), surplus); err != nil {
			return fail(fmt.Errorf("release the surplus %s in vgpud: %w", strings.Join(surplus, ", "), err))
		}
	}
	return out, ids[:spec.count], nil
}

// currentRequest is the request of the definitions affect names; when it
// names both, they must agree.
func currentRequest(d domainAPI, affect virt.Affect) (*domxml.Request, error) {
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
				return nil, usage("--live: %s is not running; change its config (the default) instead", d.Name())
			}
		}
		dd, err := parseDomain(d, which)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, dd.Request)
	}
	if len(reqs) == 2 && !sameRequest(reqs[0], reqs[1]) {
		return nil, usage("the config and the running definition of %s have different vGPUs; change one at a time (--config or --live)", d.Name())
	}
	return reqs[0], nil
}

func parseDomain(d domainAPI, which virt.Affect) (domxml.Domain, error) {
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

// detachSpec is one vgpuctl detach: ids (canonical) or, when empty, all.
type detachSpec struct {
	ids    []string
	affect virt.Affect
	// catalog says whether the domain's profile migrates: the vGPUs that
	// stay keep their overrides, the detached ones' go (nil: not touched).
	catalog *profile.Catalog
}

// detachVGPUs removes vGPUs from d and releases in vgpud those no
// definition of d uses any more.
func detachVGPUs(ctx context.Context, d domainAPI, res Reserver, spec detachSpec) (change, error) {
	ch := change{Verb: "detached", Domain: d.Name(), UUID: d.UUID(), Affect: spec.affect.String()}
	cur, err := currentRequest(d, spec.affect)
	if err != nil {
		return ch, err
	}
	// Ids no longer in the request are a retry of a release that failed.
	var sel []domxml.VGPU
	var retry []string
	if cur != nil {
		ch.Profile, ch.Request = cur.Profile, cur
		for _, v := range cur.VGPUs {
			if len(spec.ids) == 0 || slices.Contains(spec.ids, v.ID()) {
				sel = append(sel, v)
			}
		}
	}
	for _, id := range spec.ids {
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
	others, err := usedOutside(d, spec.affect, active)
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
			return ch, usage("%s has no vGPU %s (it has: %s)", d.Name(), id, idList(cur))
		}
		if others[id] {
			return ch, usage("%s is still used by %s; detach it from there first (--live or --config)", id, d.Name())
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
		if err := d.Detach(sel, spec.affect); err != nil {
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
		if err := d.SetRequest(ch.Request, spec.affect); err != nil {
			return ch, fmt.Errorf("%w (the hostdevs are detached; run the same command again to finish)", err)
		}
		if props, ok := migrationProps(spec.catalog, cur.Profile); ok && spec.affect&virt.Config != 0 {
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
			return ch, usage("%s has no vGPU %s and vgpud holds none such for it (it has: %s)", d.Name(), strings.Join(unknown, ", "), idList(cur))
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
func usedOutside(d domainAPI, affect virt.Affect, active bool) (map[string]bool, error) {
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

func printChange(w io.Writer, g *globals, ch change) error {
	if g.output == "json" {
		if ch.Changed == nil {
			ch.Changed = []domxml.VGPU{}
		}
		return writeJSON(w, ch)
	}
	if len(ch.Changed) == 0 && len(ch.Released) == 0 {
		_, err := fmt.Fprintf(w, "%s has no vGPUs to detach; nothing to do\n", ch.Domain)
		return err
	}
	if len(ch.Changed) > 0 {
		dir := "to"
		if ch.Verb == "detached" {
			dir = "from"
		}
		fmt.Fprintf(w, "%s %d x %s %s %s (%s):\n", ch.Verb, len(ch.Changed), ch.Profile, dir, ch.Domain, ch.Affect)
		var rows [][]string
		for _, v := range ch.Changed {
			rows = append(rows, []string{"  " + v.ID(), string(v.Kind), fmt.Sprint(v.Index)})
		}
		if err := table(w, []string{"  VGPU", "KIND", "INDEX"}, rows); err != nil {
			return err
		}
	}
	switch {
	case len(ch.Changed) == 0:
	case ch.Verb == "attached" && ch.Request != nil:
		fmt.Fprintf(w, "%s now asks for %d x %s; vgpud makes them ready when %s starts\n", ch.Domain, ch.Request.Count, ch.Profile, ch.Domain)
	case ch.Verb == "detached" && ch.Request != nil:
		fmt.Fprintf(w, "%s now asks for %d x %s\n", ch.Domain, ch.Request.Count, ch.Profile)
	case ch.Verb == "detached":
		fmt.Fprintf(w, "%s asks for no vGPU any more\n", ch.Domain)
	}
	if len(ch.Released) > 0 {
		fmt.Fprintf(w, "released in vgpud: %s\n", strings.Join(ch.Released, ", "))
	}
	if len(ch.Kept) > 0 {
		kept := strings.Join(ch.Kept, " ")
		if ch.Affect == virt.Live.String() {
			fmt.Fprintf(w, "still reserved: the persistent config of %s uses %s; vgpuctl detach %s %s --config releases it\n", ch.Domain, kept, ch.Domain, kept)
		} else {
			fmt.Fprintf(w, "still reserved: the running %s uses %s; vgpuctl detach %s %s releases it after %s stops (or detach it --live)\n",
				ch.Domain, kept, ch.Domain, kept, ch.Domain)
		}
	}
	return nil
}
