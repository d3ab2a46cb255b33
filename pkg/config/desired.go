package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vgpu-project/vgpu/internal/strictyaml"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

// Assignment is one GPU and the profile the config wants on it.
type Assignment struct {
	GPU     pci.Address `json:"gpu"`
	Profile string      `json:"profile"`
	// Entry is the index in Config.GPUs that selected the GPU.
	Entry int `json:"entry"`
	// MdevUUIDs are the entry's pinned mdev UUIDs (Entry.MdevUUIDs).
	MdevUUIDs []string `json:"mdevUUIDs,omitempty"`
}

// Desired resolves the config's entries against the GPUs of this host.
//
// Errors, each naming the entry: a profile the catalog lacks, an address
// not on the host, a profile for another model than the GPU (or id) it is
// given to, and two entries selecting one GPU (entries do not override each
// other: a config says one thing per GPU). An entry by id or all that
// matches no GPU here is not an error, so one config can serve hosts with
// different GPUs; its index simply appears in no Assignment.
//
// It does not check that a GPU can make the profile right now (drivers,
// IOMMU): that is profile.Catalog.Resolve's job when the carve is planned.
// Assignments are sorted by GPU address. cat must not be nil.
func (c *Config) Desired(gpus []inventory.GPU, cat *profile.Catalog) ([]Assignment, error) {
	var errs []error
	file := c.Path
	if file == "" { // a Config built in code
		file = "host config"
	}
	fail := func(i int, field string, kind error, problem, allowed string) {
		f := fmt.Sprintf("gpus[%d]", i)
		if field != "" {
			f += "." + field
		}
		errs = append(errs, &FieldError{File: file, Line: c.Line(f), Field: f, Problem: problem, Allowed: allowed, Kind: kind})
	}
	claimed := map[pci.Address]int{}
	var out []Assignment
	for i, e := range c.GPUs {
		if e.Parent != "" { // DesiredParents
			continue
		}
		var selected []inventory.GPU
		if !e.Address.IsZero() {
			g, ok := findGPU(gpus, e.Address)
			if !ok {
				fail(i, "address", ErrNoSuchGPU, fmt.Sprintf("no GPU at %s on this host", e.Address), addresses(gpus))
				continue
			}
			selected = []inventory.GPU{g}
		}
		p, ok := cat.Get(e.Profile)
		if !ok {
			fail(i, "profile", profile.ErrUnknownProfile, fmt.Sprintf("unknown profile %s", strictyaml.Quote(e.Profile)), e.fitting(selected, cat))
			continue
		}
		if problem, allowed := e.pinsFit(p); problem != "" {
			fail(i, "mdev-uuids", ErrPins, problem, allowed)
			continue
		}
		switch {
		case !e.Address.IsZero():
			if g := selected[0]; !p.Model.Matches(g.VendorID, g.DeviceID) {
				fail(i, "profile", profile.ErrWrongGPU, fmt.Sprintf("%s is for %s (%s); %s is %s",
					p.Name, p.Model.Name, p.Model.IDs(), g.Address, describe(g)), names(cat.ForGPU(g)))
				continue
			}
		case !e.ID.IsZero():
			if !p.Model.Matches(e.ID.Vendor, e.ID.Device) {
				fail(i, "profile", profile.ErrWrongGPU, fmt.Sprintf("%s is for %s (%s), not %s",
					p.Name, p.Model.Name, p.Model.IDs(), e.ID), e.fitting(nil, cat))
				continue
			}
			selected = filter(gpus, e.ID.Matches)
		case e.All:
			selected = filter(gpus, func(g inventory.GPU) bool { return p.Model.Matches(g.VendorID, g.DeviceID) })
		}
		for _, g := range selected {
			if j, dup := claimed[g.Address]; dup {
				fail(i, "", ErrConflict, fmt.Sprintf("%s selects %s, which gpus[%d] (line %d, %s) already selects",
					e.Selector(), g.Address, j, c.Line(fmt.Sprintf("gpus[%d]", j)), c.GPUs[j].Selector()),
					"one entry per GPU; select it by address in one entry only")
				continue
			}
			claimed[g.Address] = i
			out = append(out, Assignment{GPU: g.Address, Profile: p.Name, Entry: i, MdevUUIDs: e.MdevUUIDs})
		}
	}
	// Old GIM gives every GPU it drives one VF count and one scheduler.
	var first *Assignment
	for k, a := range out {
		g, _ := findGPU(gpus, a.GPU)
		if !inventory.IsGIM(g.VendorID, g.DeviceID) {
			continue
		}
		if first == nil {
			first = &out[k]
			continue
		}
		p, _ := cat.Get(a.Profile)
		q, _ := cat.Get(first.Profile)
		if p.Split != q.Split || p.GIM.SchedOption() != q.GIM.SchedOption() || p.GIM.Interval() != q.GIM.Interval() {
			fail(a.Entry, "profile", ErrGIMMixed, fmt.Sprintf("%s on %s differs from %s on %s (gpus[%d]) in its split or scheduler",
				a.Profile, a.GPU, first.Profile, first.GPU, first.Entry),
				"one profile for every GPU old AMD GIM drives: it sets one VF count (vf_num) and one scheduler for all of them")
		}
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b error) int { return strictyaml.LineOf(a) - strictyaml.LineOf(b) })
		return nil, errors.Join(errs...)
	}
	slices.SortFunc(out, func(a, b Assignment) int {
		if a.GPU.Less(b.GPU) {
			return -1
		}
		if b.GPU.Less(a.GPU) {
			return 1
		}
		return 0
	})
	return out, nil
}

// ParentAssignment is one virtual mdev parent and the profile the config
// wants on it.
type ParentAssignment struct {
	Parent  string `json:"parent"`
	Profile string `json:"profile"`
	// Entry is the index in Config.GPUs that selected the parent.
	Entry int `json:"entry"`
	// MdevUUIDs are the entry's pinned mdev UUIDs (Entry.MdevUUIDs).
	MdevUUIDs []string `json:"mdevUUIDs,omitempty"`
}

// DesiredParents resolves the config's parent entries against the catalog:
// each profile must exist and match its parent (mdev-parent: NAME). Whether
// the parent is on this host and can take the profile is for the carve to
// find, as with a GPU. Sorted by parent name. cat must not be nil.
func (c *Config) DesiredParents(cat *profile.Catalog) ([]ParentAssignment, error) {
	var errs []error
	file := c.Path
	if file == "" {
		file = "host config"
	}
	var out []ParentAssignment
	for i, e := range c.GPUs {
		if e.Parent == "" {
			continue
		}
		f := fmt.Sprintf("gpus[%d].profile", i)
		fail := func(kind error, problem string) {
			errs = append(errs, &FieldError{File: file, Line: c.Line(f), Field: f, Problem: problem,
				Allowed: parentProfiles(cat, e.Parent), Kind: kind})
		}
		p, ok := cat.Get(e.Profile)
		switch {
		case !ok:
			fail(profile.ErrUnknownProfile, fmt.Sprintf("unknown profile %s", strictyaml.Quote(e.Profile)))
		case p.Model.MdevParent != e.Parent:
			fail(profile.ErrWrongGPU, fmt.Sprintf("%s is for %s, not the mdev parent %s", p.Name, p.Model.Name, e.Parent))
		default:
			if problem, allowed := e.pinsFit(p); problem != "" {
				f := fmt.Sprintf("gpus[%d].mdev-uuids", i)
				errs = append(errs, &FieldError{File: file, Line: c.Line(f), Field: f, Problem: problem, Allowed: allowed, Kind: ErrPins})
				continue
			}
			out = append(out, ParentAssignment{Parent: e.Parent, Profile: p.Name, Entry: i, MdevUUIDs: e.MdevUUIDs})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	slices.SortFunc(out, func(a, b ParentAssignment) int { return strings.Compare(a.Parent, b.Parent) })
	return out, nil
}

// pinsFit says what is wrong with the entry's mdev-uuids for profile p:
// they name mdevs, so p must make mdevs, and at most its split of them.
func (e Entry) pinsFit(p profile.Profile) (problem, allowed string) {
	switch {
	case len(e.MdevUUIDs) == 0:
		return "", ""
	case p.Model.Dialect != inventory.DialectMdev && p.Model.Dialect != inventory.DialectSRIOVMdev:
		return fmt.Sprintf("%s makes no mdevs (dialect %s), so there is no mdev UUID to pin", p.Name, p.Model.Dialect),
			"mdev-uuids only with a profile of dialect mdev or sriov-mdev; leave it out here"
	case len(e.MdevUUIDs) > p.Split:
		return fmt.Sprintf("pins %d mdev UUIDs, more than the split of %s (%d)", len(e.MdevUUIDs), p.Name, p.Split),
			fmt.Sprintf("at most %d (the profile's split), one UUID per mdev", p.Split)
	}
	return "", ""
}

func parentProfiles(cat *profile.Catalog, parent string) string {
	ps := cat.ForParent(parent)
	if len(ps) == 0 {
		return "none: no profile in the catalog matches mdev-parent: " + parent
	}
	return names(ps)
}

// fitting lists the profiles an entry could name: those for the GPU it
// selects or the id it gives, else the whole catalog.
func (e Entry) fitting(selected []inventory.GPU, cat *profile.Catalog) string {
	var ps []profile.Profile
	switch {
	case len(selected) > 0:
		ps = cat.ForGPU(selected[0])
	case !e.ID.IsZero():
		ps = cat.ForGPU(inventory.GPU{VendorID: e.ID.Vendor, DeviceID: e.ID.Device})
	default:
		ps = cat.Profiles()
	}
	return names(ps)
}

func names(ps []profile.Profile) string {
	if len(ps) == 0 {
		return "none: no profile in the catalog is for this GPU"
	}
	return profile.Names(ps)
}

func addresses(gpus []inventory.GPU) string {
	if len(gpus) == 0 {
		return "none: this host has no GPU"
	}
	s := make([]string, len(gpus))
	for i, g := range gpus {
		s[i] = g.Address.String()
	}
	return strings.Join(s, ", ")
}

func findGPU(gpus []inventory.GPU, a pci.Address) (inventory.GPU, bool) {
	for _, g := range gpus {
		if g.Address == a {
			return g, true
		}
	}
	return inventory.GPU{}, false
}

func filter(gpus []inventory.GPU, keep func(inventory.GPU) bool) []inventory.GPU {
	var out []inventory.GPU
	for _, g := range gpus {
		if keep(g) {
			out = append(out, g)
		}
	}
	return out
}

// describe names a GPU as lspci would: "NVIDIA Corporation TU104GL [Tesla T4] (10de:1eb8)".
func describe(g inventory.GPU) string {
	ids := fmt.Sprintf("%04x:%04x", g.VendorID, g.DeviceID)
	if n := strings.TrimSpace(g.VendorName + " " + g.DeviceName); n != "" && !strings.Contains(n, ids[:4]) {
		return n + " (" + ids + ")"
	}
	return ids
}
