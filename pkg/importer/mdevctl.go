package importer

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/mdevctl"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// MdevctlInput is what Mdevctl reads.
type MdevctlInput struct {
	// FS is the host: its GPUs, their VFs, the mdev parents, the mdevs
	// running now.
	FS sysfs.FS
	// Dir holds mdevctl's definitions (mdevctl.DefaultDir).
	Dir     string
	Catalog *profile.Catalog
	// Parent limits the import to one GPU, by address (its VFs' definitions
	// with it), or one virtual mdev parent, by name; "" imports all.
	Parent string
}

// ErrNoDefinitions: mdevctl defines nothing for the parent asked for.
var ErrNoDefinitions = errors.New("no mdevctl definitions")

// vfParams is the attribute mdevctl writes NVIDIA's vGPU plugin parameters
// through, as a profile's vgpu-params are written (docs/profiles.md).
const vfParams = "nvidia/vgpu_params"

// placed is a definition and the VF of its GPU it is on (-1: the GPU
// itself, or a virtual parent).
type placed struct {
	mdevctl.Definition
	vf int
}

// target is a GPU or virtual parent with its definitions.
type target struct {
	key    string
	gpu    *inventory.GPU
	parent *inventory.MdevParent
	defs   []placed
	bad    []*mdevctl.FileError
}

// Mdevctl imports mdevctl's definitions: a config entry per GPU (its VFs'
// definitions with it) or virtual parent, with the catalog profile whose
// mdev type is the definitions' type on that model, the vgpu_params they
// set, and a split that holds them all. Parents with definitions of more
// than one type or attrs vgpud does not set, a type no profile has, more
// definitions than the profile makes, a parent not on this host, or a file
// mdevctl cannot read are named in Skipped.
func Mdevctl(in MdevctlInput) (Result, error) {
	defs, bad, err := mdevctl.Read(in.Dir)
	if err != nil {
		return Result{}, err
	}
	gpus, err := inventory.Discover(in.FS, nil)
	if err != nil {
		return Result{}, fmt.Errorf("import mdevctl definitions: %w", err)
	}
	parents, err := inventory.MdevParents(in.FS, nil)
	if err != nil {
		return Result{}, fmt.Errorf("import mdevctl definitions: %w", err)
	}
	type owner struct{ gpu, vf int }
	owners := map[string]owner{}
	for i, g := range gpus {
		owners[g.Address.String()] = owner{i, -1}
		if g.SRIOV == nil {
			continue
		}
		addrs, _, err := sriov.VFAddresses(in.FS, g.Address)
		if err != nil {
			return Result{}, fmt.Errorf("import mdevctl definitions: %w", err)
		}
		for n, a := range addrs {
			owners[a.String()] = owner{i, n}
		}
		for _, vf := range g.SRIOV.VFs {
			owners[vf.Address.String()] = owner{i, vf.Index}
		}
	}
	byName := map[string]*inventory.MdevParent{}
	for i := range parents {
		byName[parents[i].Name] = &parents[i]
	}

	r := Result{Header: mdevctlHeader(in.Dir)}
	targets := map[string]*target{}
	notHere := map[string][]string{} // parent -> UUIDs or files
	otherPCI := map[string][]string{}
	place := func(parent string) (*target, int) {
		if o, ok := owners[parent]; ok {
			g := &gpus[o.gpu]
			key := g.Address.String()
			if targets[key] == nil {
				targets[key] = &target{key: key, gpu: g}
			}
			return targets[key], o.vf
		}
		p, ok := byName[parent]
		if !ok || p.PCI != nil {
			return nil, 0
		}
		if targets[parent] == nil {
			targets[parent] = &target{key: parent, parent: p}
		}
		return targets[parent], -1
	}
	elsewhere := func(parent, what string) {
		if p, ok := byName[parent]; ok && p.PCI != nil {
			otherPCI[parent] = append(otherPCI[parent], what)
			return
		}
		notHere[parent] = append(notHere[parent], what)
	}
	for _, d := range defs {
		t, vf := place(d.Parent)
		if t == nil {
			elsewhere(d.Parent, d.UUID)
			continue
		}
		t.defs = append(t.defs, placed{d, vf})
	}
	for _, b := range bad {
		t, _ := place(b.Parent)
		if t == nil {
			elsewhere(b.Parent, b.Path)
			continue
		}
		t.bad = append(t.bad, b)
	}

	keys := make([]string, 0, len(targets))
	for k := range targets {
		keys = append(keys, k)
	}
	// GPUs by address (fixed-width hex sorts as numbers), then parents by name.
	slices.SortFunc(keys, func(a, b string) int {
		if (targets[a].gpu == nil) != (targets[b].gpu == nil) {
			if targets[a].gpu != nil {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	if in.Parent != "" {
		want := in.Parent
		if a, err := pci.ParseAddress(in.Parent); err == nil {
			want = a.String()
			if o, ok := owners[want]; ok {
				want = gpus[o.gpu].Address.String()
			}
		}
		_, found := targets[want]
		if !found && len(notHere[want]) == 0 && len(otherPCI[want]) == 0 {
			have := slices.Concat(keys, mapKeys(notHere), mapKeys(otherPCI))
			return Result{}, fmt.Errorf("%w for %s in %s (it has definitions for: %s)", ErrNoDefinitions, in.Parent, in.Dir, orNone(have))
		}
		keys = slices.DeleteFunc(keys, func(k string) bool { return k != want })
		notHere = onlyKey(notHere, want)
		otherPCI = onlyKey(otherPCI, want)
	}
	for _, k := range keys {
		r.mdevctlTarget(targets[k], in.Catalog, in.FS)
	}
	for _, p := range mapKeys(otherPCI) {
		r.Skipped = append(r.Skipped, fmt.Sprintf("%s: an mdev parent that is no GPU vgpud carves (mdevctl definitions %s)", p, strings.Join(otherPCI[p], ", ")))
	}
	for _, p := range mapKeys(notHere) {
		r.Skipped = append(r.Skipped, fmt.Sprintf("%s: not on this host (mdevctl definitions %s); import on the host that has it", p, strings.Join(notHere[p], ", ")))
	}
	if err := r.check(gpus, in.Catalog); err != nil {
		return Result{}, err
	}
	return r, nil
}

func mdevctlHeader(dir string) []string {
	return []string{
		"vgpud host config (docs/config.md), imported by vgpuctl import mdevctl",
		"from the mdevctl definitions in " + dir + ".",
		"",
		"The definitions' UUIDs are pinned (mdev-uuids): vgpud's carve keeps an mdev of",
		"a pinned UUID that runs, makes the others, and makes them all again after a",
		"reboot, so a domain whose XML names one (<hostdev type='mdev'>) starts as",
		"before. vgpud never hands a pinned mdev to a vGPU request. The profile's other",
		"mdevs get vgpud's own UUIDs (docs/carving.md). A UUID that cannot be pinned",
		"is said so in its entry's comment, with why.",
	}
}

// mdevctlTarget maps one GPU's or virtual parent's definitions to an entry,
// or says in Skipped why not.
func (r *Result) mdevctlTarget(t *target, cat *profile.Catalog, fs sysfs.FS) {
	where := t.key
	if t.gpu != nil {
		where = describe(*t.gpu, cat)
	}
	skip := func(format string, args ...any) {
		r.Skipped = append(r.Skipped, where+": "+fmt.Sprintf(format, args...))
	}
	if len(t.bad) > 0 {
		for _, b := range t.bad {
			skip("mdevctl cannot read %s (%s), so it starts nothing there either; mend or remove it", b.Path, b.Problem)
		}
		return
	}
	onPF, onVF := false, false
	types := map[string][]string{}
	var order []string
	perVF := map[int][]string{}
	for _, d := range t.defs {
		onPF, onVF = onPF || d.vf < 0, onVF || d.vf >= 0
		if types[d.Type] == nil {
			order = append(order, d.Type)
		}
		types[d.Type] = append(types[d.Type], d.UUID)
		if d.vf >= 0 {
			perVF[d.vf] = append(perVF[d.vf], d.UUID)
		}
	}
	if onPF && onVF {
		skip("mdevctl defines mdevs both on the GPU and on its VFs; a vgpud profile makes them on one or the other")
		return
	}
	if len(order) > 1 {
		var parts []string
		for _, ty := range order {
			parts = append(parts, fmt.Sprintf("%s (%d: %s)", ty, len(types[ty]), strings.Join(types[ty], ", ")))
		}
		skip("mixed mdev types, %s; a vgpud profile is one type in equal parts", strings.Join(parts, ", "))
		return
	}
	typ := order[0]
	first := t.defs[0]
	for _, d := range t.defs[1:] {
		if !slices.Equal(d.Attrs, first.Attrs) {
			skip("definitions %s and %s set different attrs; a vgpud profile sets one vgpu_params for all its vGPUs", first.UUID, d.UUID)
			return
		}
	}
	params, why := vgpuParams(first.Attrs, t.gpu != nil && t.gpu.VendorID == inventory.VendorNVIDIA)
	if why != "" {
		skip("%s (definitions %s)", why, strings.Join(types[typ], ", "))
		return
	}

	dialect := inventory.DialectMdev
	var cands []profile.Profile
	switch {
	case t.gpu != nil && onVF:
		dialect = inventory.DialectSRIOVMdev
		fallthrough
	case t.gpu != nil:
		cands = slices.DeleteFunc(cat.ForGPU(*t.gpu), func(p profile.Profile) bool { return p.Model.Dialect != dialect })
	default:
		cands = cat.ForParent(t.key)
	}
	resolved := func(p profile.Profile) (string, error) {
		var pl profile.Plan
		var err error
		if t.gpu != nil {
			pl, err = cat.Resolve(p.Name, *t.gpu)
		} else {
			pl, err = cat.ResolveParent(p.Name, *t.parent)
		}
		if err != nil {
			return p.Mdev.ID, err
		}
		return pl.MdevType, nil
	}
	var matches []profile.Profile
	var cannot error
	for _, p := range cands {
		if !plain(p) || !sameParams(p.Params, params) {
			continue
		}
		id, err := resolved(p)
		if id == typ {
			matches = append(matches, p)
			cannot = err
		}
	}
	hw := t.typeName(typ)
	switch len(matches) {
	case 0:
		what := "profiles of " + string(dialect) + " there"
		if len(params) > 0 {
			what += " with those vgpu_params"
		}
		skip("no catalog profile has mdev type %s%s (definitions %s); %s: %s", typ, hw, strings.Join(types[typ], ", "), what, names(cands))
		return
	case 1:
	default:
		skip("mdev type %s%s is in more than one catalog profile (%s); write the entry by hand", typ, hw, names(matches))
		return
	}
	p := matches[0]
	if len(t.defs) > p.Split {
		skip("%d definitions of %s%s, and its profile %s makes %d; vgpud cannot make them all", len(t.defs), typ, hw, p.Name, p.Split)
		return
	}
	if onVF {
		for vf, us := range perVF {
			if len(us) > 1 {
				skip("%d definitions on VF %d (%s); one mdev fits on a VF", len(us), vf, strings.Join(us, ", "))
				return
			}
			if vf >= p.Split {
				skip("definition %s is on VF %d, and profile %s puts its %d mdevs on VFs 0 to %d", us[0], vf, p.Name, p.Split, p.Split-1)
				return
			}
		}
	}

	e := Entry{Entry: config.Entry{Profile: p.Name}}
	if t.gpu != nil {
		e.Address = t.gpu.Address
	} else {
		e.Parent = t.key
	}
	if hw == "" && p.Mdev.Name != typ {
		hw = " (" + p.Mdev.Name + ")"
	}
	e.Comment = append(e.Comment, fmt.Sprintf("%s: %s of %s%s: profile %s, %d x %s",
		where, count(len(t.defs), "mdevctl definition"), typ, hw, p.Name, p.Split, p.Mdev.Name))
	if cannot != nil {
		e.Comment = append(e.Comment, "note: not carvable now: "+oneLine(cannot.Error()))
	}
	running := t.running()
	// On VFs the pins take the first VFs in order: in VF order, each
	// lands where mdevctl put it when the VFs it uses are the first ones.
	defs := slices.Clone(t.defs)
	slices.SortStableFunc(defs, func(a, b placed) int { return a.vf - b.vf })
	for _, d := range defs {
		on := d.Parent
		if d.vf >= 0 {
			on = fmt.Sprintf("%s, VF %d", d.Parent, d.vf)
		}
		fate := r.pin(&e, d.UUID, t, running, typ, fs)
		e.Comment = append(e.Comment, fmt.Sprintf("  %s (%s, start %s): %s", d.UUID, on, d.Start, fate))
		if d.Auto() {
			r.Commands = append(r.Commands, fmt.Sprintf("mdevctl modify -u %s -p %s --manual", d.UUID, d.Parent))
		}
	}
	defined := map[string]bool{}
	for _, d := range t.defs {
		defined[d.UUID] = true
	}
	for _, u := range mapKeys(running) {
		m := running[u]
		if !defined[u] && (m.typ != typ || onVF && m.vf >= p.Split) {
			e.Comment = append(e.Comment, fmt.Sprintf("  %s (%s %s, running, no definition): vgpud's carve removes it (never while a VM uses it)", u, m.parent, m.typ))
		}
	}
	r.Entries = append(r.Entries, e)
}

// pin adds a definition's UUID to e's mdev-uuids where it fits, and says
// what becomes of it. It does not fit where another entry pins it already
// (mdevctl keeps one definition per parent, so one UUID may be defined on
// two), or where an mdev of it runs outside t: vgpud moves no mdev between
// parents, and the carve would refuse.
func (r *Result) pin(e *Entry, u string, t *target, running map[string]active, typ string, f sysfs.FS) string {
	if slices.Contains(e.MdevUUIDs, u) {
		return "not pinned again: mdevctl defines it on another VF of this GPU too, and it is pinned once"
	}
	for _, o := range r.Entries {
		if slices.Contains(o.MdevUUIDs, u) {
			return "not pinned: the entry of " + o.Selector() + " pins it already (mdevctl defines it there too)"
		}
	}
	m, here := running[u]
	if !here {
		in, ok, err := mdev.Get(f, u)
		switch {
		case err != nil:
			return "not pinned: " + oneLine(err.Error())
		case ok:
			return fmt.Sprintf("not pinned: an mdev of it runs on %s (type %s), and vgpud moves no mdev between parents; stop it there, then pin it by hand", in.Parent, in.Type)
		}
	}
	e.MdevUUIDs = append(e.MdevUUIDs, u)
	switch {
	case !here:
		return "pinned: not running, vgpud's carve makes it"
	case m.typ != typ:
		return fmt.Sprintf("pinned: runs as %s, vgpud's carve makes it again as %s (never while a VM uses it)", m.typ, typ)
	}
	return "pinned: running, vgpud's carve keeps it"
}

// active is one running mdev of a target.
type active struct {
	parent, typ string
	vf          int
}

// running lists the mdevs running on t's GPU, its VFs, or the parent.
func (t *target) running() map[string]active {
	out := map[string]active{}
	add := func(parent string, vf int, types []inventory.MdevType) {
		for _, ty := range types {
			for _, u := range ty.Instances {
				out[u] = active{parent: parent, typ: ty.ID, vf: vf}
			}
		}
	}
	switch {
	case t.gpu != nil:
		add(t.key, -1, t.gpu.MdevTypes)
		if t.gpu.SRIOV != nil {
			for _, vf := range t.gpu.SRIOV.VFs {
				add(vf.Address.String(), vf.Index, vf.MdevTypes)
			}
		}
	default:
		add(t.key, -1, t.parent.Types)
	}
	return out
}

// typeName is " (NAME)" for an mdev type the host lists, for messages.
func (t *target) typeName(id string) string {
	var lists [][]inventory.MdevType
	switch {
	case t.gpu != nil:
		lists = append(lists, t.gpu.MdevTypes)
		if t.gpu.SRIOV != nil {
			for _, vf := range t.gpu.SRIOV.VFs {
				lists = append(lists, vf.MdevTypes)
			}
		}
	default:
		lists = append(lists, t.parent.Types)
	}
	for _, l := range lists {
		for _, ty := range l {
			if ty.ID == id && ty.Name != "" && ty.Name != id {
				return " (" + ty.Name + ")"
			}
		}
	}
	return ""
}

// vgpuParams reads the attrs vgpud can set: none, or NVIDIA's
// nvidia/vgpu_params ("frame_rate_limiter=0, disable_vnc=1"), which a
// profile's vgpu-params write. why says what else there is.
func vgpuParams(attrs []mdevctl.Attr, nvidia bool) (ps []profile.VGPUParam, why string) {
	if len(attrs) == 0 {
		return nil, ""
	}
	var all []string
	for _, a := range attrs {
		all = append(all, a.Name+"="+a.Value)
	}
	if len(attrs) > 1 || attrs[0].Name != vfParams || !nvidia {
		return nil, "attrs vgpud does not set: " + strings.Join(all, ", ") + " (a profile sets " + vfParams + " of NVIDIA vGPUs only)"
	}
	for _, kv := range strings.Split(attrs[0].Value, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || !slices.Contains(profile.NVIDIAParams(), k) || v != "0" && v != "1" {
			return nil, fmt.Sprintf("%s %q: %s is not a vgpu-params setting (%s, each 0 or 1)", vfParams, attrs[0].Value, kv, strings.Join(profile.NVIDIAParams(), ", "))
		}
		ps = append(ps, profile.VGPUParam{Name: k, Value: int(v[0] - '0')})
	}
	return ps, ""
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func onlyKey[V any](m map[string]V, key string) map[string]V {
	out := map[string]V{}
	if v, ok := m[key]; ok {
		out[key] = v
	}
	return out
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// count is "1 thing" or "n things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
