package profile

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/xe"
)

// Drivers the VFs of a plan end up on.
const (
	DriverVFIO   = "vfio-pci"
	DriverNVIDIA = "nvidia"
)

// Resolve turns profile name on GPU g into the plan the carver makes. It
// refuses, with a message that lists what would work, a profile that does
// not exist (ErrUnknownProfile), is for another model (ErrWrongGPU), or
// that g cannot make right now per its inventory (ErrCannotSplit).
func (c *Catalog) Resolve(name string, g inventory.GPU) (Plan, error) {
	p, ok := c.Get(name)
	if !ok {
		return Plan{}, refuse(ErrUnknownProfile, "unknown profile %q; %s", name, c.fitting(g))
	}
	if !p.Model.Matches(g.VendorID, g.DeviceID) {
		return Plan{}, refuse(ErrWrongGPU, "profile %s is for %s (%s); %s is %s; %s",
			p.Name, p.Model.Name, p.Model.IDs(), g.Address, describe(g), c.fitting(g))
	}
	r, err := realise(p, g)
	if err != nil && p.Builtin() {
		return Plan{}, refuse(ErrCannotSplit, "%s cannot be passed through on %s: %s", describe(g), g.Address, err)
	}
	if err != nil {
		return Plan{}, c.cannot(p.Model.Name, p.Split, g, err.Error())
	}
	return r.plan(p, g), nil
}

// ResolveParent turns profile name on a virtual mdev parent (one with no PCI
// device behind it, such as the kernel's mbochs sample) into the plan the
// carver makes: Split instances of the profile's type on the parent. It
// refuses as Resolve does: ErrUnknownProfile, ErrWrongGPU (a profile whose
// model is not this parent), ErrCannotSplit.
func (c *Catalog) ResolveParent(name string, parent inventory.MdevParent) (Plan, error) {
	p, ok := c.Get(name)
	if !ok {
		return Plan{}, refuse(ErrUnknownProfile, "unknown profile %q; %s", name, c.fittingParent(parent.Name))
	}
	if p.Model.MdevParent == "" || p.Model.MdevParent != parent.Name {
		return Plan{}, refuse(ErrWrongGPU, "profile %s is for %s (%s); %s is a virtual mdev parent; %s",
			p.Name, p.Model.Name, p.Model.IDs(), parent.Name, c.fittingParent(parent.Name))
	}
	g := inventory.GPU{MdevTypes: parent.Types, NUMANode: -1, IOMMUGroup: -1}
	r, err := realise(p, g)
	if err != nil {
		return Plan{}, refuse(ErrCannotSplit, "%s cannot be split %d:1 on mdev parent %s: %s", p.Model.Name, p.Split, parent.Name, err)
	}
	pl := r.plan(p, g)
	pl.Parent = parent.Name
	return pl, nil
}

// ForParent lists the profiles for a virtual mdev parent.
func (c *Catalog) ForParent(name string) []Profile {
	var out []Profile
	for _, p := range c.Profiles() {
		if p.Model.MdevParent != "" && p.Model.MdevParent == name {
			out = append(out, p)
		}
	}
	return out
}

func (c *Catalog) fittingParent(name string) string {
	ps := c.ForParent(name)
	if len(ps) == 0 {
		return "no profile in the catalog is for it"
	}
	return "profiles for it: " + Names(ps)
}

// ResolveSplit resolves the profile of g's model that splits it n:1, for
// configs that ask for a ratio rather than a name.
func (c *Catalog) ResolveSplit(n int, g inventory.GPU) (Plan, error) {
	all := c.ForGPU(g)
	// The built-in passthrough answers 1 where the model's own do not.
	if slices.ContainsFunc(all, func(p Profile) bool { return !p.Builtin() && p.Split == n }) {
		all = slices.DeleteFunc(all, Profile.Builtin)
	}
	var names, plain []string
	for _, p := range all {
		if p.Split == n {
			names = append(names, p.Name)
			if p.GIM == nil && p.Xe == nil && p.GPUInstance == nil && p.Scheduler == nil && !p.MixedSize {
				plain = append(plain, p.Name)
			}
		}
	}
	if len(names) > 1 {
		// One board, two NVIDIA host-driver generations (catalog.go,
		// generations): keep the profiles of the dialects g shows.
		var shown, shownPlain []string
		for _, n := range names {
			if p, _ := c.Get(n); slices.Contains(g.Dialects, p.Model.Dialect) {
				shown = append(shown, n)
				if slices.Contains(plain, n) {
					shownPlain = append(shownPlain, n)
				}
			}
		}
		if len(shown) > 0 && len(shown) < len(names) {
			names, plain = shown, shownPlain
		}
	}
	if len(names) > 1 && len(plain) == 1 {
		names = plain // a scheduler, or MIG backing, is asked for by name
	}
	if len(names) > 1 {
		// Models that share a device id (the A2 and the A16) are told
		// apart by the types the GPU offers: keep what it can make.
		var usable []string
		for _, n := range names {
			p, _ := c.Get(n)
			if _, err := realise(p, g); err == nil {
				usable = append(usable, n)
			}
		}
		if len(usable) == 1 {
			names = usable
		}
	}
	switch len(names) {
	case 0:
		return Plan{}, c.cannot(modelName(all, g), n, g, "")
	case 1:
		return c.Resolve(names[0], g)
	}
	return Plan{}, refuse(ErrUnknownProfile, "%s splits %d:1 with profiles %s; name one",
		all[0].Model.Name, n, strings.Join(names, ", "))
}

// Usable is the profiles of g's model that g can make right now.
func (c *Catalog) Usable(g inventory.GPU) []Profile {
	var out []Profile
	for _, p := range c.ForGPU(g) {
		if _, err := realise(p, g); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// Group is the profiles one catalog file has for a GPU's model (the
// built-in passthrough is a group of its own), those the GPU can make now,
// and when it can make none, why.
type Group struct {
	Model    string            `json:"model"`
	File     string            `json:"file"`
	Dialect  inventory.Dialect `json:"dialect"`
	Profiles []string          `json:"profiles"`
	Fit      []string          `json:"fit,omitempty"`
	// WhyNot, when none fits, is why the first of them does not.
	WhyNot string `json:"whyNot,omitempty"`
}

// Groups lists g's profiles by catalog file, in ForGPU's order, each with
// what fits now or why nothing does.
func (c *Catalog) Groups(g inventory.GPU) []Group {
	var out []Group
	for _, p := range c.ForGPU(g) {
		i := slices.IndexFunc(out, func(x Group) bool { return x.File == p.File })
		if i < 0 {
			i = len(out)
			out = append(out, Group{Model: p.Model.Name, File: p.File, Dialect: p.Model.Dialect})
		}
		gr := &out[i]
		gr.Profiles = append(gr.Profiles, p.Name)
		if _, err := realise(p, g); err == nil {
			gr.Fit, gr.WhyNot = append(gr.Fit, p.Name), ""
		} else if len(gr.Fit) == 0 && gr.WhyNot == "" {
			gr.WhyNot = err.Error()
		}
	}
	return out
}

// cannot is the ErrCannotSplit refusal, with the splits g can make, and
// whether it can be passed through whole.
func (c *Catalog) cannot(model string, n int, g inventory.GPU, why string) error {
	msg := fmt.Sprintf("%s cannot be split %d:1", model, n)
	if why != "" {
		msg += fmt.Sprintf(" on %s: %s", g.Address, why)
	}
	var splits []int
	var names []string
	whole := false
	for _, p := range c.Usable(g) {
		if p.Builtin() {
			whole = true
			continue
		}
		if !slices.Contains(splits, p.Split) {
			splits = append(splits, p.Split)
		}
		names = append(names, p.Name)
	}
	if len(splits) == 0 {
		msg += "; no profile of it fits right now"
	} else {
		msg += fmt.Sprintf("; it can be split %s (profiles %s)", joinInts(splits), strings.Join(names, ", "))
	}
	if whole {
		msg += "; it can be passed through whole (profile " + Passthrough + ")"
	}
	return refuse(ErrCannotSplit, "%s", msg)
}

// modelName is the catalog's name of g's model, from its profiles ps;
// lspci's words where the catalog has only the built-in passthrough.
func modelName(ps []Profile, g inventory.GPU) string {
	for _, p := range ps {
		if !p.Builtin() {
			return p.Model.Name
		}
	}
	return describe(g)
}

// fitting lists the profiles for g, for refusals.
func (c *Catalog) fitting(g inventory.GPU) string {
	var names []string
	for _, p := range c.ForGPU(g) {
		names = append(names, p.Name)
	}
	if len(names) == 1 { // the built-in passthrough alone
		return "no profile in the catalog fits it, but the built-in " + Passthrough + " passes it through whole"
	}
	return "profiles for it: " + strings.Join(names, ", ")
}

// describe names a GPU as lspci would: "NVIDIA Corporation TU104GL [Tesla T4] (10de:1eb8)".
func describe(g inventory.GPU) string {
	ids := fmt.Sprintf("%04x:%04x", g.VendorID, g.DeviceID)
	// Without pci.ids the inventory names a device by its hex id.
	name := func(s string, id uint16) string {
		if strings.EqualFold(strings.TrimPrefix(strings.TrimSpace(s), "0x"), fmt.Sprintf("%04x", id)) {
			return ""
		}
		return strings.TrimSpace(s)
	}
	names := strings.TrimSpace(name(g.VendorName, g.VendorID) + " " + name(g.DeviceName, g.DeviceID))
	if names == "" {
		return ids
	}
	return names + " (" + ids + ")"
}

// realisation is how the hardware makes a profile: the types as the driver
// numbers and names them, which may differ from the catalog's.
type realisation struct {
	mdev   MdevType
	nvidia NVIDIAType
	fbMB   uint64 // one vGPU's framebuffer as the driver states it; 0 unknown
}

func (r realisation) plan(p Profile, g inventory.GPU) Plan {
	pl := Plan{Profile: p.Name, GPU: g.Address, Dialect: p.Model.Dialect, Split: p.Split, FramebufferMB: r.fbMB}
	if q := p.XeVRAMQuota(); q > 0 {
		pl.FramebufferMB = q >> 20
	}
	if pl.FramebufferMB == 0 {
		total := g.FramebufferMB
		if total == 0 {
			total = p.Model.FramebufferMB
		}
		pl.FramebufferMB = total / uint64(p.Split)
	}
	switch p.Model.Dialect {
	case inventory.DialectSRIOV:
		pl.NumVFs, pl.VFDriver = p.Split, DriverVFIO
		pl.GIM, pl.Xe, pl.XeVRAMQuota = p.GIM, p.Xe, p.XeVRAMQuota()
		// Migratable VFs where the variant driver is there: xe's VFs
		// migrate on xe-vfio-pci only.
		if p.Model.Migration != nil && g.Driver == xe.Driver && g.Xe != nil && g.Xe.VFIODriver != "" {
			pl.VFDriver = g.Xe.VFIODriver
		}
	case inventory.DialectMdev:
		pl.MdevType, pl.MdevTypeName = r.mdev.ID, r.mdev.Name
	case inventory.DialectSRIOVMdev:
		pl.NumVFs, pl.VFDriver = p.Split, DriverNVIDIA
		pl.MdevType, pl.MdevTypeName = r.mdev.ID, r.mdev.Name
	case inventory.DialectNVIDIAVF:
		pl.NumVFs, pl.VFDriver = p.Split, DriverNVIDIA
		pl.NVIDIATypeID, pl.NVIDIATypeName = r.nvidia.ID, r.nvidia.Name
		if gi := p.GPUInstance; gi != nil {
			g := *gi
			pl.GPUInstance = &g
		}
	}
	pl.Scheduler, pl.MixedSize = p.Scheduler, p.MixedSize
	return pl
}

// gvtgRoom checks that GVT-g has room for n instances of t. A GVT-g type
// splits the GPU by time (its weight); how many fit is what is left of the
// aperture, the high GM and the fences, so its count is
// available_instances plus its own instances. With other types' instances
// on the GPU the room they would free is unknown; the kernel judges then
// (ENOSPC, and the carve is undone).
func gvtgRoom(g inventory.GPU, t inventory.MdevType, n int) error {
	for _, o := range g.MdevTypes {
		if o.ID != t.ID && len(o.Instances) > 0 {
			return nil
		}
	}
	if room := t.AvailableInstances + len(t.Instances); room < n {
		return fmt.Errorf("its mdev type %s has room for %d instances, not %d: GVT-g's room is the graphics aperture the firmware sets (less 128 MB for the host) and Gen9's 28 guest fences; a larger aperture (1024 MB) makes more", t.ID, room, n)
	}
	return nil
}

// realise checks that g can make p right now and how; the error says why not.
func realise(p Profile, g inventory.GPU) (realisation, error) {
	r := realisation{mdev: p.Mdev, nvidia: p.NVIDIA}
	n := p.Split
	// What the host stands in the way of, as inventory says it: the
	// IOMMU, the SR-IOV capability, NVIDIA's vGPU host driver.
	if why := inventory.WhyNot(g, p.Model.Dialect); why != "" {
		return r, errors.New(why)
	}
	switch p.Model.Dialect {
	case inventory.DialectPassthrough:
		return r, nil

	case inventory.DialectSRIOV:
		return r, needVFs(g, n)

	case inventory.DialectMdev:
		if len(g.MdevTypes) == 0 {
			return r, fmt.Errorf("it offers no mdev types (is the vendor's vGPU host driver loaded, or i915 with enable_gvt=1 and module kvmgt?)")
		}
		t, err := findMdev(g.MdevTypes, p.Mdev)
		if err != nil {
			return r, err
		}
		r.mdev, r.fbMB = MdevType{ID: t.ID, Name: hwName(t.Name, t.ID, p.Mdev.Name)}, t.FramebufferMB
		if mdev.IsGVTg(t.ID) {
			return r, gvtgRoom(g, t, n)
		}
		if t.MaxInstances > 0 && t.MaxInstances != n {
			return r, fmt.Errorf("its mdev type %s makes %d instances, not %d", t.ID, t.MaxInstances, n)
		}
		// Without max_instance in the description, what is free now is a
		// lower bound: more than n proves the type is a finer split.
		if t.MaxInstances == 0 && t.AvailableInstances+len(t.Instances) > n {
			return r, fmt.Errorf("its mdev type %s makes at least %d instances, not %d", t.ID, t.AvailableInstances+len(t.Instances), n)
		}
		return r, nil

	case inventory.DialectSRIOVMdev:
		if err := needVFs(g, n); err != nil {
			return r, err
		}
		// Types show on the VFs once they are enabled (some drivers also
		// list them on the PF); before that the catalog is all we have.
		types := slices.Clone(g.MdevTypes)
		for _, vf := range g.SRIOV.VFs {
			for _, t := range vf.MdevTypes {
				if !slices.ContainsFunc(types, func(x inventory.MdevType) bool { return x.ID == t.ID }) {
					types = append(types, t)
				}
			}
		}
		if len(types) == 0 {
			if p.Mdev.ID == "" {
				return r, unnumbered(mdevWant(p.Mdev)+" (mdev type)", g, "mdev_supported_types", false)
			}
			return r, nil
		}
		t, err := findMdev(types, p.Mdev)
		if err != nil {
			return r, err
		}
		r.mdev, r.fbMB = MdevType{ID: t.ID, Name: hwName(t.Name, t.ID, p.Mdev.Name)}, t.FramebufferMB
		// Each VF holds one instance, so available_instances says nothing
		// about the split; max_instance in the description does, when it
		// counts per GPU (1 may just be the VF's own limit).
		if t.MaxInstances > 1 && t.MaxInstances != n {
			return r, fmt.Errorf("its mdev type %s makes %d instances, not %d", t.ID, t.MaxInstances, n)
		}
		return r, nil

	case inventory.DialectNVIDIAVF:
		if err := needVFs(g, n); err != nil {
			return r, err
		}
		var offered []inventory.VGPUType
		assigned, listed := false, false
		for _, vf := range g.SRIOV.VFs {
			if vf.NVIDIA == nil {
				continue
			}
			listed = true
			assigned = assigned || vf.NVIDIA.CurrentType != 0
			for _, t := range vf.NVIDIA.Creatable {
				if !slices.ContainsFunc(offered, func(x inventory.VGPUType) bool { return x.ID == t.ID }) {
					offered = append(offered, t)
				}
			}
		}
		if gi := p.GPUInstance; gi != nil {
			// MIG-backed types show only once their GPU instances exist,
			// which the carve makes: only a type the driver names
			// otherwise refuses.
			r.fbMB = gi.MemoryMB()
			if mp, ok := g.MIGProfile(gi.ID); ok && mp.MemoryMB > 0 {
				r.fbMB = mp.MemoryMB // NVML's word for this GPU
			}
			if t, err := findNVIDIA(offered, p.NVIDIA); err == nil {
				r.nvidia = NVIDIAType{ID: t.ID, Name: hwName(t.Name, "", p.NVIDIA.Name)}
			} else if errors.As(err, new(*mismatch)) {
				return r, err
			}
		} else {
			t, err := findNVIDIA(offered, p.NVIDIA)
			switch {
			case err == nil:
				r.nvidia = NVIDIAType{ID: t.ID, Name: hwName(t.Name, "", p.NVIDIA.Name)}
			case errors.As(err, new(*mismatch)):
				return r, err
			case len(offered) > 0 && !assigned:
				// creatable_vgpu_types shrinks to what still fits once a VF has
				// a type, so only a list from an idle GPU can refuse.
				return r, err
			}
		}
		if r.nvidia.ID == 0 {
			// NVML's supported types name every type whatever is carved,
			// a MIG-backed one before any VF can list it.
			t, err := findNVIDIA(g.NVIDIATypes, p.NVIDIA)
			switch {
			case err == nil:
				r.nvidia = NVIDIAType{ID: t.ID, Name: hwName(t.Name, "", p.NVIDIA.Name)}
			case errors.As(err, new(*mismatch)):
				return r, err
			case p.GPUInstance != nil:
				return r, fmt.Errorf("the catalog gives %s (MIG-backed vGPU type) by name only (no public source gives its id), and NVIDIA's NVML did not name it here: a VF lists it only once its GPU instance exists, so vgpu needs NVML (libnvidia-ml) to carve it; or give the id in a profile file of your own", nvidiaWant(p.NVIDIA))
			default:
				return r, unnumbered(nvidiaWant(p.NVIDIA)+" (vGPU type)", g, "creatable_vgpu_types", listed)
			}
		}
		return r, nil
	}
	return r, fmt.Errorf("dialect %q is not supported", p.Model.Dialect)
}

// unnumbered says why a type the catalog names without an id cannot be
// planned yet: only the driver's lists give its id, and they show it only
// on enabled VFs with room for it. listed: some VF shows the list at all.
func unnumbered(what string, g inventory.GPU, list string, listed bool) error {
	head := fmt.Sprintf("the catalog gives %s by name only (no public source gives its id), and NVIDIA's NVML did not name it here (vgpud asks it when libnvidia-ml loads)", what)
	const own = "give the id in a profile file of your own"
	switch {
	case g.SRIOV == nil || g.SRIOV.NumVFs == 0:
		enable := "enable them"
		if g.VendorID == NVIDIAVendor {
			enable = fmt.Sprintf("enable them (/usr/lib/nvidia/sriov-manage -e %s)", g.Address)
		}
		return fmt.Errorf("%s, and the VFs that list it in %s are not enabled; %s and try again, or %s", head, list, enable, own)
	case !listed:
		return fmt.Errorf("%s, and no VF shows %s (is the vGPU host driver for this dialect loaded?); %s", head, list, own)
	}
	return fmt.Errorf("%s, and no VF lists it in %s now (a VF lists only what still fits beside the GPU's vGPUs); free a VF, or %s", head, list, own)
}

// needVFs: a GPU with SR-IOV (WhyNot checked the capability) has room for
// n VFs.
func needVFs(g inventory.GPU, n int) error {
	if g.SRIOV != nil && g.SRIOV.TotalVFs < n {
		return fmt.Errorf("sriov_totalvfs is %d", g.SRIOV.TotalVFs)
	}
	return nil
}

// mismatch is a type the driver numbers as the catalog does but names as
// something else: the catalog is wrong for this driver, and guessing is worse.
type mismatch struct{ msg string }

func (m *mismatch) Error() string { return m.msg }

// findMdev finds want among types (findType).
func findMdev(types []inventory.MdevType, want MdevType) (inventory.MdevType, error) {
	return findType(types, func(t inventory.MdevType) (string, string, bool) { return t.ID, t.Name, named(t.Name, t.ID) },
		want.ID, want.Name, "mdev type",
		func() string { return fmt.Sprintf("it does not offer mdev type %s; it offers", mdevWant(want)) })
}

// findNVIDIA finds want among a VF's types (findType).
func findNVIDIA(types []inventory.VGPUType, want NVIDIAType) (inventory.VGPUType, error) {
	return findType(types, func(t inventory.VGPUType) (int, string, bool) { return t.ID, t.Name, t.Name != "" },
		want.ID, want.Name, "vGPU type",
		func() string { return fmt.Sprintf("its VFs do not offer vGPU type %s; they offer", nvidiaWant(want)) })
}

// findType finds the catalog's type (wantID, wantName; no id: the zero
// I) among a driver's types by name, then by id; key gives a type's id,
// its name and whether the driver names it. Names are what NVIDIA
// documents and keeps across releases; ids are the driver's own
// numbering, so a type is found even where a driver (or the fake kernel)
// numbers it differently. A type the catalog gives no id is found by name
// only. noun names the kind of type in a mismatch; lacks begins the error
// when none is found, which goes on to list what the driver offers.
func findType[T any, I comparable](types []T, key func(T) (I, string, bool), wantID I, wantName, noun string, lacks func() string) (T, error) {
	for _, t := range types {
		if _, name, ok := key(t); ok && sameName(name, wantName) {
			return t, nil
		}
	}
	var none I
	for _, t := range types {
		id, name, ok := key(t)
		if wantID == none || id != wantID {
			continue
		}
		if ok {
			return t, &mismatch{fmt.Sprintf("its %s %v is %q, the catalog expects %q; the catalog does not match this driver", noun, id, name, wantName)}
		}
		return t, nil
	}
	offers := make([]string, len(types))
	for i, t := range types {
		id, name, _ := key(t)
		offers[i] = fmt.Sprintf("%v (%s)", id, name)
	}
	var zero T
	return zero, fmt.Errorf("%s %s", lacks(), strings.Join(offers, ", "))
}

// mdevWant and nvidiaWant name a catalog type for messages: "nvidia-232
// (GRID T4-4Q)", or its name alone when the catalog has no id for it.
func mdevWant(t MdevType) string {
	if t.ID == "" {
		return fmt.Sprintf("%q", t.Name)
	}
	return fmt.Sprintf("%s (%s)", t.ID, t.Name)
}

func nvidiaWant(t NVIDIAType) string {
	if t.ID == 0 {
		return fmt.Sprintf("%q", t.Name)
	}
	return fmt.Sprintf("%d (%s)", t.ID, t.Name)
}

// named reports whether an mdev type has a name of its own: without one the
// kernel (>= 6.1) shows the type id, or the id without its driver prefix.
func named(name, id string) bool {
	name = strings.TrimSpace(name)
	return name != "" && name != id && !strings.HasSuffix(id, "-"+name)
}

// sameName compares names as NVIDIA spells them across driver branches:
// "GRID A100-4C" became "NVIDIA A100-4C", and newer boards put the board
// before the type ("NVIDIA RTX Pro 6000 Blackwell DC-48Q" for the type
// tables' DC-48Q). One name matches the other when it ends in it, a whole
// word at a time, after the brand.
func sameName(hw, want string) bool {
	a, b := typeKey(hw), typeKey(want)
	if len(a) < len(b) {
		a, b = b, a
	}
	return b != "" && (a == b || strings.HasSuffix(a, " "+b))
}

// typeKey is a type name without NVIDIA's brand and extra spaces.
func typeKey(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	for _, p := range []string{"NVIDIA ", "GRID "} {
		if r, ok := strings.CutPrefix(s, p); ok {
			return r
		}
	}
	return s
}

// hwName is the type's name for messages: the hardware's when it has one.
func hwName(hw, id, catalog string) string {
	if id == "" && strings.TrimSpace(hw) != "" || id != "" && named(hw, id) {
		return strings.TrimSpace(hw)
	}
	return catalog
}
