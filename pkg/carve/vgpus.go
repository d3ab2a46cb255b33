package carve

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// VGPUs lists the vGPUs carved on gpus, with the profile each GPU carries
// (from catalog; "" when none matches) and whether each is in use: a vGPU
// whose use a checker cannot tell (ErrUseUnknown) is listed UseUnknown,
// not an error. A VFIOUsage without Snapshot is snapshotted here, once for
// the whole listing.
func VGPUs(ctx context.Context, f sysfs.FS, gpus []inventory.GPU, catalog *profile.Catalog, usage ...UsageChecker) ([]vgpu.VGPU, error) {
	return vgpusOf(ctx, f, gpus, catalog, nil, usage)
}

// VGPUsLabelled is VGPUs with the profile of gpus[i] given as profiles[i]
// (ProfileOf's answer the caller already has), not worked out again:
// ProfileOf plans every profile of the GPU's model.
func VGPUsLabelled(ctx context.Context, f sysfs.FS, gpus []inventory.GPU, catalog *profile.Catalog, profiles []string, usage ...UsageChecker) ([]vgpu.VGPU, error) {
	if len(profiles) != len(gpus) {
		return nil, fmt.Errorf("list vGPUs: %d profiles for %d GPUs", len(profiles), len(gpus))
	}
	return vgpusOf(ctx, f, gpus, catalog, profiles, usage)
}

func vgpusOf(ctx context.Context, f sysfs.FS, gpus []inventory.GPU, catalog *profile.Catalog, profiles []string, usage []UsageChecker) ([]vgpu.VGPU, error) {
	// Each mdev of these GPUs is read by itself: the cost follows the GPUs
	// asked about, not the host (a prepare asks about one).
	var err error
	addMdevs := func(parent string, types []inventory.MdevType, add func(vgpu.VGPU)) {
		for _, t := range types {
			for _, u := range t.Instances {
				// Its parent and type are known: only its binding is read
				// (none when removed since the inventory was read).
				group, driver, gerr := mdev.Binding(f, u)
				if gerr != nil && err == nil {
					err = gerr
				}
				add(vgpu.VGPU{ID: u, Kind: vgpu.KindMdev, Parent: parent, Type: t.ID, IOMMUGroup: group, Driver: driver})
			}
		}
	}
	var out []vgpu.VGPU
	for i, g := range gpus {
		prof := ""
		switch {
		case profiles != nil:
			prof = profiles[i]
		case catalog != nil:
			prof = ProfileOf(g, catalog)
		}
		ga := g.Address.String() // once per GPU, not per vGPU
		add := func(v vgpu.VGPU) {
			v.GPU, v.Profile = ga, prof
			out = append(out, v)
		}
		if g.Driver == vfioPCI {
			add(vgpu.VGPU{ID: ga, Kind: vgpu.KindPF, IOMMUGroup: g.IOMMUGroup, Driver: g.Driver})
		}
		addMdevs(ga, g.MdevTypes, add)
		if g.SRIOV == nil {
			continue
		}
		for _, vf := range g.SRIOV.VFs {
			switch {
			case vf.NVIDIA != nil && vf.NVIDIA.CurrentType != 0:
				add(vgpu.VGPU{ID: vf.Address.String(), Kind: vgpu.KindNVIDIAVF, Parent: ga,
					Type: nvTypeName(g, vf.NVIDIA.CurrentType, catalog), IOMMUGroup: vf.IOMMUGroup, Driver: vf.Driver})
			case pci.IsVFIODriver(vf.Driver):
				add(vgpu.VGPU{ID: vf.Address.String(), Kind: vgpu.KindVF, Parent: ga,
					IOMMUGroup: vf.IOMMUGroup, Driver: vf.Driver})
			}
			addMdevs(vf.Address.String(), vf.MdevTypes, add)
		}
	}
	if err != nil {
		return nil, err
	}
	return out, markInUse(ctx, out, usage)
}

// markInUse fills in each of vs whether usage says it is in use, or that
// its use cannot be told (UseUnknown): one /proc scan for the whole
// listing.
func markInUse(ctx context.Context, vs []vgpu.VGPU, usage []UsageChecker) error {
	usage = snapshots(usage)
	for i := range vs {
		if err := fillUse(ctx, &vs[i], usage); err != nil {
			return err
		}
	}
	return nil
}

// snapshots is usage with each VFIOUsage that scans per call made one
// that scans once.
func snapshots(usage []UsageChecker) []UsageChecker {
	out := slices.Clone(usage)
	for i, u := range out {
		if v, ok := u.(VFIOUsage); ok && v.snap == nil {
			out[i] = v.Snapshot()
		}
	}
	return out
}

// fillUse asks each checker about v: the first that says in use names the
// holder; one that cannot tell leaves v UseUnknown unless another knows.
func fillUse(ctx context.Context, v *vgpu.VGPU, usage []UsageChecker) error {
	unknown := false
	for _, u := range usage {
		h, in, err := u.Holder(ctx, v.ID)
		switch {
		case errors.Is(err, ErrUseUnknown):
			unknown = true
		case err != nil:
			return err
		case in:
			v.InUse, v.Holder = true, h
			return nil
		}
	}
	v.UseUnknown = unknown
	return nil
}

// nvTypeName names an NVIDIA type id. A VF's own list stops offering its
// type once assigned, so look at NVML's list (Enrich), the siblings, then
// the catalog.
func nvTypeName(g inventory.GPU, id int, catalog *profile.Catalog) string {
	for _, t := range g.NVIDIATypes {
		if t.ID == id {
			return t.Name
		}
	}
	for _, vf := range g.SRIOV.VFs {
		if vf.NVIDIA == nil {
			continue
		}
		for _, t := range vf.NVIDIA.Creatable {
			if t.ID == id {
				return t.Name
			}
		}
	}
	if catalog != nil {
		for _, p := range catalog.ForGPU(g) {
			if p.NVIDIA.ID == id {
				return p.NVIDIA.Name
			}
		}
	}
	return fmt.Sprintf("type %d", id)
}

// ProfileOf names the catalog profile whose plan g already satisfies, or "".
// Profiles of the same shape (one type, other vgpu_params) all satisfy
// it: the first is named, and Carries tells whether another would be.
//
// Profiles that pin VRAM go first: one without a pin leaves the VRAM as it
// is, so it is carried too.
func ProfileOf(g inventory.GPU, catalog *profile.Catalog) string {
	for _, p := range pinnedFirst(catalog.ForGPU(g)) {
		if Carries(g, catalog, p.Name) {
			return p.Name
		}
	}
	return ""
}

// pinnedFirst orders ps with the profiles that pin VRAM first, the order
// kept otherwise.
func pinnedFirst(ps []profile.Profile) []profile.Profile {
	slices.SortStableFunc(ps, func(a, b profile.Profile) int {
		pa, pb := a.XeVRAMQuota() != 0, b.XeVRAMQuota() != 0
		switch {
		case pa == pb:
			return 0
		case pa:
			return -1
		}
		return 1
	})
	return ps
}

// Carries reports whether g is carved as profile name wants.
func Carries(g inventory.GPU, catalog *profile.Catalog, name string) bool {
	pl, err := catalog.Resolve(name, g)
	if err != nil {
		return false
	}
	if pci.IsVFIODriver(g.Driver) && pl.Dialect != inventory.DialectPassthrough {
		return false
	}
	cp, err := PlanCarve(g, pl, "")
	return err == nil && cp.Empty() && carries(g, pl)
}

// carries rules out the empty GPU, which every split-1 plan of a dialect
// without VFs would otherwise match.
func carries(g inventory.GPU, pl profile.Plan) bool {
	switch pl.Dialect {
	case inventory.DialectPassthrough:
		return g.Driver == vfioPCI
	case inventory.DialectMdev:
		return pl.Split > 0
	default:
		return pl.NumVFs > 0
	}
}

// ParentVGPUs lists the mdevs of the host's virtual mdev parents (mbochs),
// each with GPU and Parent set to the parent's name and, when profiles
// names the parent, that profile if the mdev has its type; else the
// catalog profile the parent wholly carries (ProfileOfParent), or "";
// and, as VGPUs, whether each is in use.
func ParentVGPUs(ctx context.Context, f sysfs.FS, catalog *profile.Catalog, profiles map[string]string, usage ...UsageChecker) ([]vgpu.VGPU, error) {
	ps, err := inventory.VirtualMdevParents(f)
	if err != nil {
		return nil, err
	}
	var out []vgpu.VGPU
	for _, p := range ps {
		whole := ""
		if catalog != nil {
			whole = ProfileOfParent(p, catalog)
		}
		wantType := ""
		if want := profiles[p.Name]; want != "" && catalog != nil {
			if pl, err := catalog.ResolveParent(want, p); err == nil {
				wantType = pl.MdevType
			}
		}
		for _, t := range p.Types {
			prof := whole
			if wantType != "" && t.ID == wantType {
				prof = profiles[p.Name]
			}
			for _, u := range t.Instances {
				// Each read by itself, as VGPUs does: the cost follows
				// these parents' mdevs, not every mdev of the host.
				group, driver, err := mdev.Binding(f, u)
				if err != nil {
					return nil, err
				}
				out = append(out, vgpu.VGPU{ID: u, GPU: p.Name, Kind: vgpu.KindMdev, Parent: p.Name, Type: t.ID, Profile: prof,
					IOMMUGroup: group, Driver: driver})
			}
		}
	}
	return out, markInUse(ctx, out, usage)
}

// ProfileOfParent names the catalog profile a virtual mdev parent wholly
// carries (its split of the profile's type and nothing else), or "".
func ProfileOfParent(p inventory.MdevParent, catalog *profile.Catalog) string {
	for _, pr := range catalog.ForParent(p.Name) {
		pl, err := catalog.ResolveParent(pr.Name, p)
		if err != nil || pl.Split == 0 {
			continue
		}
		if len(planMdevs(p.Name, p.Types, pl.MdevType, pl.Split, nil, func(i int) string { return fmt.Sprint("new", i) })) == 0 {
			return pr.Name
		}
	}
	return ""
}
