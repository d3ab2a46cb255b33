package profile

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/inventory"
)

// Catalog is every profile known to this host. It is read-only once
// loaded, so one Catalog serves concurrent callers.
type Catalog struct {
	profiles []Profile         // sorted by model, split, name
	byName   map[string]int    // index into profiles
	where    map[string]string // name -> "file:line" defining it, for messages
	files    []*File           // for checking a GPU is not claimed twice
}

// LoadCatalog reads every *.yaml in dir of fsys. A profile name defined in
// two files is an error naming both; so is one GPU claimed with two
// different dialects or framebuffers.
func LoadCatalog(fsys fs.FS, dir string) (*Catalog, error) {
	c := newCatalog()
	if err := c.addDir(fsys, dir, func(name string) string { return path.Join(dir, name) }); err != nil {
		return nil, err
	}
	c.sort()
	return c, nil
}

// Load is the catalog built into the binary (profiles/*.yaml) plus every
// *.yaml in dirs, in order. A later file may add profiles, even for a model
// the built-in catalog has, but may not redefine a profile name.
func Load(dirs ...string) (*Catalog, error) {
	c := newCatalog()
	var errs []error
	for _, f := range builtinFiles() {
		errs = append(errs, c.add(f)...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("built-in catalog: %w", err)
	}
	for _, dir := range dirs {
		if err := c.addDir(os.DirFS(dir), ".", func(name string) string { return filepath.Join(dir, name) }); err != nil {
			return nil, err
		}
	}
	c.sort()
	return c, nil
}

func newCatalog() *Catalog {
	return &Catalog{byName: map[string]int{}, where: map[string]string{}}
}

// addDir decodes every *.yaml in dir and adds it; display names a file in
// messages. Errors of all files are reported together.
func (c *Catalog) addDir(fsys fs.FS, dir string, display func(string) string) error {
	return eachFile(fsys, dir, display, c.add)
}

// eachFile decodes every *.yaml in dir in name order and hands each to
// use; display names a file in messages. The errors of reading, decoding
// and use are joined in file order.
func eachFile(fsys fs.FS, dir string, display func(string) string, use func(*File) []error) error {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return fmt.Errorf("read profile directory %s: %w", display(""), err)
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		name := display(e.Name())
		data, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			errs = append(errs, fmt.Errorf("read profile file %s: %w", name, err))
			continue
		}
		f, err := Decode(name, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, use(f)...)
	}
	return errors.Join(errs...)
}

// generations reports whether a and b are the two NVIDIA host-driver
// generations of one SR-IOV board: one mdev per VF before vGPU 17, a type
// per VF from 17 on.
func generations(a, b inventory.Dialect) bool {
	return a == inventory.DialectSRIOVMdev && b == inventory.DialectNVIDIAVF ||
		a == inventory.DialectNVIDIAVF && b == inventory.DialectSRIOVMdev
}

// add merges a decoded file, refusing what would make the catalog ambiguous.
func (c *Catalog) add(f *File) []error {
	var errs []error
	bad := func(field, problem, allowed string) {
		errs = append(errs, &FieldError{File: f.Path, Line: f.line(field), Field: field, Problem: problem, Allowed: allowed, Kind: ErrInvalid})
	}
	for i, id := range f.Model.DeviceIDs {
		for _, o := range c.files {
			if !o.Model.Matches(f.Model.VendorID, id) {
				continue
			}
			// An Ampere board speaks sriov-mdev under a pre-17 host driver
			// and nvidia-vf under vGPU 17+ (MIG-backed or time-sliced):
			// its profiles for each sit in files of their own.
			mixed := generations(o.Model.Dialect, f.Model.Dialect)
			if !mixed && o.Model.Dialect != f.Model.Dialect || o.Model.FramebufferMB != f.Model.FramebufferMB {
				bad(fmt.Sprintf("match.devices[%d]", i),
					fmt.Sprintf("%04x:%04x is already %s in %s (dialect %s, framebuffer-mb %d)",
						f.Model.VendorID, id, o.Model.Name, o.Path, o.Model.Dialect, o.Model.FramebufferMB),
					"one dialect and framebuffer-mb per GPU across the catalog")
			}
		}
	}
	for i, s := range f.Profiles {
		p := Profile{Spec: s, Model: f.Model.clone(), File: f.Path}
		field := fmt.Sprintf("profiles[%d].name", i)
		here := fmt.Sprintf("%s:%d", f.Path, f.line(field))
		if j, dup := c.byName[s.Name]; dup {
			// The same definition twice (the built-in catalog and an
			// installed copy of it) is harmless; a different one is not.
			if old := c.profiles[j]; !reflect.DeepEqual(old.Spec, p.Spec) || !reflect.DeepEqual(old.Model, p.Model) {
				bad(field, fmt.Sprintf("%s is already defined in %s", s.Name, c.where[s.Name]), "a name unique across the catalog")
			}
			continue
		}
		c.byName[s.Name] = len(c.profiles)
		c.where[s.Name] = here
		c.profiles = append(c.profiles, p)
	}
	if len(errs) == 0 {
		c.files = append(c.files, f)
	}
	return errs
}

func (c *Catalog) sort() {
	slices.SortFunc(c.profiles, func(a, b Profile) int {
		return cmp.Or(cmp.Compare(a.Model.Name, b.Model.Name), cmp.Compare(a.Split, b.Split), cmp.Compare(a.Name, b.Name))
	})
	for i, p := range c.profiles {
		c.byName[p.Name] = i
	}
}

// Passthrough is the built-in profile every GPU physical function has: the
// whole GPU on vfio-pci, with the other functions of its IOMMU group, for
// one VM. No catalog file may use the name.
const Passthrough = "passthrough"

// BuiltinFile is where the built-in passthrough profile comes from, in
// place of a catalog file.
const BuiltinFile = "built-in"

// passthrough is the built-in profile: its model is any GPU.
func passthrough() Profile {
	return Profile{
		Spec: Spec{Name: Passthrough, Split: 1, Description: "the whole GPU and its IOMMU group, passed through to one VM (any GPU)"},
		Model: Model{Name: "any GPU", AnyGPU: true, Dialect: inventory.DialectPassthrough,
			Source: "built into vgpu: any GPU physical function (PCI class 0x03xxxx or 0x12xxxx) with an IOMMU group"},
		File: BuiltinFile,
	}
}

// Builtin reports whether p is the built-in passthrough profile.
func (p Profile) Builtin() bool { return p.Model.AnyGPU }

// Names lists the names of ps, for messages ("t4-4q, t4-8q").
func Names(ps []Profile) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// Profiles is every profile, sorted by model then split, the built-in
// passthrough last.
func (c *Catalog) Profiles() []Profile {
	out := make([]Profile, len(c.profiles), len(c.profiles)+1)
	for i, p := range c.profiles {
		out[i] = p.clone()
	}
	return append(out, passthrough())
}

// Get returns the profile called name.
func (c *Catalog) Get(name string) (Profile, bool) {
	if name == Passthrough {
		return passthrough(), true
	}
	i, ok := c.byName[name]
	if !ok {
		return Profile{}, false
	}
	return c.profiles[i].clone(), true
}

// ForGPU is the profiles of g's model (by vendor and device id), sorted by
// split, then the built-in passthrough, whether or not the GPU can make
// them right now (see Usable).
func (c *Catalog) ForGPU(g inventory.GPU) []Profile {
	var out []Profile
	for _, p := range c.profiles {
		if p.Model.Matches(g.VendorID, g.DeviceID) {
			out = append(out, p.clone())
		}
	}
	return append(out, passthrough())
}

// clone keeps callers from reaching the catalog's slices.
func (p Profile) clone() Profile {
	p.Model = p.Model.clone()
	return p
}
