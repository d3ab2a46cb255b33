package importer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vgpu-project/vgpu/internal/strictyaml"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpudm"
)

// VGPUDMInput is what VGPUDM reads.
type VGPUDMInput struct {
	Spec *vgpudm.Spec
	// Config is the vgpu-config to import (nvidia-vgpu-dm apply -c); "" the
	// file's only one.
	Config string
	// FS is the host: which GPU a GPU index is, and which of two profiles
	// of one type its driver makes. A host without GPUs imports the
	// entries that select by device-filter or all.
	FS      sysfs.FS
	Catalog *profile.Catalog
}

// VGPUDM imports one vgpu-config: every entry becomes config entries of
// the catalog profile whose vGPU type is the entry's and whose split is
// its count, selecting the GPUs the tool would (all, a device-filter id,
// or the GPU at an index on this host). An entry of more than one type, no
// type, a type no profile has, a count that is not a profile's split, a
// subsystem filter, an index this host lacks, or one that selects GPUs a
// later entry also selects (the tool then applies the later) is named in
// Skipped.
func VGPUDM(in VGPUDMInput) (Result, error) {
	c, err := in.Spec.Select(in.Config)
	if err != nil {
		return Result{}, err
	}
	gpus, err := inventory.Discover(in.FS, nil)
	if err != nil {
		return Result{}, fmt.Errorf("import %s: %w", in.Spec.Path, err)
	}
	nv := nvidiaGPUs(gpus)
	r := Result{Header: vgpudmHeader(in.Spec.Path, c.Name, nv, in.Catalog)}
	im := vgpudmImport{r: &r, cat: in.Catalog, gpus: gpus, nv: nv}
	for i, e := range c.Entries {
		im.entry(fmt.Sprintf("vgpu-configs.%s[%d] (line %d)", strictyaml.Quote(c.Name), i, e.Line), i, e)
	}
	im.dropOverlaps()
	for _, m := range im.made {
		if !m.dropped {
			r.Entries = append(r.Entries, m.Entry)
		}
	}
	if err := r.check(gpus, in.Catalog); err != nil {
		return Result{}, err
	}
	return r, nil
}

// nvidiaGPUs are the GPUs the tool numbers, in its order: NVIDIA functions
// of class VGA or 3D controller that are not VFs, by PCI address
// (go-nvlib nvpci GetGPUs).
func nvidiaGPUs(gpus []inventory.GPU) []inventory.GPU {
	var out []inventory.GPU
	for _, g := range gpus {
		if c := g.Class >> 8; g.VendorID == inventory.VendorNVIDIA && (c == 0x0300 || c == 0x0302) {
			out = append(out, g)
		}
	}
	return out // Discover lists by address
}

func vgpudmHeader(file, name string, nv []inventory.GPU, cat *profile.Catalog) []string {
	h := []string{
		"vgpud host config (docs/config.md), imported by vgpuctl import vgpu-device-manager",
		"from vgpu-config " + name + " of " + file + ".",
		"",
		"Each GPU the tool's config selects gets the catalog profile of its vGPU type whose",
		"split is the count asked for. vgpud makes those vGPUs when it carves the GPU and",
		"keeps them (the tool makes them anew, with random UUIDs, at each apply). A",
		"device-filter became an id entry; a GPU index the address of the GPU this host",
		"numbers so (its NVIDIA GPUs in PCI address order, as the tool counts them).",
	}
	if len(nv) > 0 {
		var idx []string
		for i, g := range nv {
			idx = append(idx, fmt.Sprintf("%d %s", i, describe(g, cat)))
		}
		h = append(h, "GPU indexes here: "+strings.Join(idx, ", ")+".")
	}
	return h
}

// made is an entry of the import, with the tool's entry it comes from.
type made struct {
	Entry
	from    int
	label   string
	dropped bool
}

type vgpudmImport struct {
	r    *Result
	cat  *profile.Catalog
	gpus []inventory.GPU
	nv   []inventory.GPU
	made []made
}

func (im *vgpudmImport) entry(label string, idx int, e vgpudm.Entry) {
	skip := func(format string, args ...any) {
		im.r.Skipped = append(im.r.Skipped, label+": "+fmt.Sprintf(format, args...))
	}
	switch len(e.VGPUDevices) {
	case 0:
		skip("no vGPU types: the tool deletes every vGPU of the GPUs it selects, which is no vgpud profile; leave them out of the config (vgpud uncarves only GPUs it carved)")
		return
	case 1:
	default:
		var parts []string
		for _, tc := range e.VGPUDevices {
			parts = append(parts, fmt.Sprintf("%s: %d", tc.Type, tc.Count))
		}
		skip("mixed types on one GPU (%s); a vgpud profile is one type in equal parts", strings.Join(parts, ", "))
		return
	}
	tc := e.VGPUDevices[0]
	var ids []vgpudm.DeviceID
	for _, f := range e.DeviceFilter {
		id, err := vgpudm.ParseDeviceID(f)
		if err != nil {
			skip("%v; the tool matches no GPU with it", err)
			return
		}
		if id.HasSubsystem {
			skip("device-filter %s selects by subsystem too (%04x:%04x); vgpud selects a GPU by vendor:device or by address", f, id.SubsystemVendor, id.SubsystemDevice)
			return
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	typed := im.profilesOf(tc.Type.Name)
	if len(typed) == 0 {
		skip("no catalog profile has vGPU type %s (vgpuctl profiles lists them)", tc.Type)
		return
	}
	if len(ids) > 0 {
		typed = slices.DeleteFunc(typed, func(p profile.Profile) bool {
			return !slices.ContainsFunc(ids, func(id vgpudm.DeviceID) bool { return p.Model.Matches(id.Vendor, id.Device) })
		})
		if len(typed) == 0 {
			skip("no catalog profile has vGPU type %s for device-filter %s", tc.Type, strings.Join(e.DeviceFilter, ", "))
			return
		}
	}
	fit := slices.DeleteFunc(slices.Clone(typed), func(p profile.Profile) bool { return p.Split != tc.Count })
	if len(fit) == 0 {
		var splits []string
		for _, p := range typed {
			splits = append(splits, fmt.Sprintf("%s splits %s %d:1", p.Name, p.Model.Name, p.Split))
		}
		skip("%d x %s is not an equal split vgpud makes: %s (the type's most instances; vgpud makes them all)", tc.Count, tc.Type, strings.Join(splits, ", "))
		return
	}
	add := func(ce config.Entry, p profile.Profile, note string) {
		ce.Profile = p.Name
		c := []string{fmt.Sprintf("%s: %d x %s: profile %s (%s)", label, tc.Count, tc.Type, p.Name, p.Model.Name)}
		if note != "" {
			c = append(c, note)
		}
		im.made = append(im.made, made{Entry: Entry{Entry: ce, Comment: c}, from: idx, label: label})
	}
	switch {
	case e.AllDevices && len(ids) == 0:
		for _, group := range byModel(fit) {
			p, note, why := im.pick(group, func(g inventory.GPU) bool { return group[0].Model.Matches(g.VendorID, g.DeviceID) })
			if why != "" {
				skip("%s", why)
				continue
			}
			add(config.Entry{All: true}, p, note)
		}
	case e.AllDevices:
		for _, id := range ids {
			cands := slices.DeleteFunc(slices.Clone(fit), func(p profile.Profile) bool { return !p.Model.Matches(id.Vendor, id.Device) })
			if len(cands) == 0 {
				skip("device-filter %s: %d x %s is not a profile of %s (%s)", id.PCIID(), tc.Count, tc.Type, id.PCIID(), names(fit))
				continue
			}
			p, note, why := im.pick(cands, func(g inventory.GPU) bool { return g.VendorID == id.Vendor && g.DeviceID == id.Device })
			if why != "" {
				skip("%s", why)
				continue
			}
			add(config.Entry{ID: config.PCIID{Vendor: id.Vendor, Device: id.Device}}, p, note)
		}
	default:
		if len(e.Devices) == 0 {
			skip("devices [] selects no GPU")
			return
		}
		var seen []int
		for _, n := range e.Devices {
			if slices.Contains(seen, n) {
				continue
			}
			seen = append(seen, n)
			if n < 0 || n >= len(im.nv) {
				skip("GPU index %d: this host has %d NVIDIA GPUs%s; import on the host the config is for", n, len(im.nv), indexes(im.nv))
				continue
			}
			g := im.nv[n]
			if len(ids) > 0 && !slices.ContainsFunc(ids, func(id vgpudm.DeviceID) bool { return g.VendorID == id.Vendor && g.DeviceID == id.Device }) {
				skip("GPU index %d is %s (%04x:%04x), which its device-filter does not match: the tool leaves it alone, and so does this config", n, g.Address, g.VendorID, g.DeviceID)
				continue
			}
			cands := slices.DeleteFunc(slices.Clone(fit), func(p profile.Profile) bool { return !p.Model.Matches(g.VendorID, g.DeviceID) })
			if len(cands) == 0 {
				skip("GPU index %d is %s, and %d x %s is a profile of %s", n, describe(g, im.cat), tc.Count, tc.Type, modelNames(fit))
				continue
			}
			p, note, why := im.pick(cands, func(x inventory.GPU) bool { return x.Address == g.Address })
			if why != "" {
				skip("%s", why)
				continue
			}
			add(config.Entry{Address: g.Address}, p, note)
		}
	}
}

// profilesOf lists the catalog profiles whose vGPU type is name as the
// tool writes it: the last word of the type's name ("GRID T4-4Q" is
// T4-4Q), as go-nvlib's nvmdev reads it. Profiles that set what the tool
// cannot (a scheduler, vgpu_params, mixed-size mode) are left out.
func (im *vgpudmImport) profilesOf(name string) []profile.Profile {
	var out []profile.Profile
	for _, p := range im.cat.Profiles() {
		words := strings.Fields(typeName(p))
		if len(words) > 0 && words[len(words)-1] == name && plain(p) && len(p.Params) == 0 {
			out = append(out, p)
		}
	}
	return out
}

// pick chooses among profiles of one type and count for the GPUs of this
// host that on selects: the one profile there is, or the one whose dialect
// those GPUs' driver gives first (an A100's type is a sriov-mdev profile
// under vGPU 16 and a nvidia-vf one under 17+); why says why none can be
// chosen, note how one was.
func (im *vgpudmImport) pick(cands []profile.Profile, on func(inventory.GPU) bool) (p profile.Profile, note, why string) {
	if len(cands) == 1 {
		return cands[0], "", ""
	}
	var chosen []string
	for _, g := range im.gpus {
		if !on(g) {
			continue
		}
		for _, d := range g.Dialects {
			i := slices.IndexFunc(cands, func(p profile.Profile) bool { return p.Model.Dialect == d && p.Model.Matches(g.VendorID, g.DeviceID) })
			if i >= 0 {
				p = cands[i]
				if !slices.Contains(chosen, p.Name) {
					chosen = append(chosen, p.Name)
				}
				break
			}
		}
	}
	var opts []string
	for _, c := range cands {
		opts = append(opts, fmt.Sprintf("%s (%s)", c.Name, c.Model.Dialect))
	}
	switch len(chosen) {
	case 1:
		return p, fmt.Sprintf("chosen by this host's driver (%s) among %s: a host whose driver differs needs the other", p.Model.Dialect, strings.Join(opts, " and ")), ""
	case 0:
		return p, "", fmt.Sprintf("the type is %s, by the host's NVIDIA driver, and no GPU here shows which; import on such a host, or write the entry by hand", strings.Join(opts, " or "))
	}
	return p, "", fmt.Sprintf("GPUs here take %s by their drivers; select them by address by hand", strings.Join(chosen, " and "))
}

// dropOverlaps drops entries of different tool entries that select one
// GPU: the tool applies the later entry to it, a vgpud config says one
// thing per GPU, and which of two entries holds where is for the admin.
func (im *vgpudmImport) dropOverlaps() {
	for i := range im.made {
		for j := i + 1; j < len(im.made); j++ {
			a, b := &im.made[i], &im.made[j]
			if a.from == b.from || !im.overlap(a.Entry.Entry, b.Entry.Entry) {
				continue
			}
			for _, m := range []*made{a, b} {
				if !m.dropped {
					m.dropped = true
					im.r.Skipped = append(im.r.Skipped, fmt.Sprintf("%s: selects GPUs that %s selects too (%s, %s); the tool applies the later on them; select them by address, one entry each",
						m.label, other(m, a, b).label, a.Selector(), b.Selector()))
				}
			}
		}
	}
}

func other(m, a, b *made) *made {
	if m == a {
		return b
	}
	return a
}

// overlap reports whether two entries can select one GPU: on any host for
// all and id entries, on this host for an address.
func (im *vgpudmImport) overlap(a, b config.Entry) bool {
	ids := func(e config.Entry) (vendor uint16, devices []uint16, ok bool) {
		switch {
		case e.All:
			p, _ := im.cat.Get(e.Profile)
			return p.Model.VendorID, p.Model.DeviceIDs, true
		case !e.ID.IsZero():
			return e.ID.Vendor, []uint16{e.ID.Device}, true
		}
		for _, g := range im.gpus {
			if g.Address == e.Address {
				return g.VendorID, []uint16{g.DeviceID}, true
			}
		}
		return 0, nil, false
	}
	if !a.Address.IsZero() && !b.Address.IsZero() {
		return a.Address == b.Address
	}
	va, da, oka := ids(a)
	vb, db, okb := ids(b)
	return oka && okb && va == vb && slices.ContainsFunc(da, func(d uint16) bool { return slices.Contains(db, d) })
}

// byModel groups profiles whose models share a PCI id: the files of one
// GPU for different driver generations.
func byModel(ps []profile.Profile) [][]profile.Profile {
	var out [][]profile.Profile
	for _, p := range ps {
		i := slices.IndexFunc(out, func(g []profile.Profile) bool {
			return slices.ContainsFunc(g[0].Model.DeviceIDs, func(d uint16) bool { return p.Model.Matches(g[0].Model.VendorID, d) })
		})
		if i < 0 {
			out = append(out, []profile.Profile{p})
			continue
		}
		out[i] = append(out[i], p)
	}
	return out
}

func modelNames(ps []profile.Profile) string {
	var out []string
	for _, p := range ps {
		if !slices.Contains(out, p.Model.Name) {
			out = append(out, p.Model.Name)
		}
	}
	return strings.Join(out, ", ")
}

func indexes(nv []inventory.GPU) string {
	if len(nv) == 0 {
		return ""
	}
	var out []string
	for i, g := range nv {
		out = append(out, fmt.Sprintf("%d %s", i, g.Address))
	}
	return " (" + strings.Join(out, ", ") + ")"
}
