package vgpudm

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-project/vgpu/internal/strictyaml"
)

// Version is the only spec version vgpu-device-manager reads.
const Version = "v1"

// ErrInvalid: a file vgpu-device-manager would refuse.
var ErrInvalid = errors.New("invalid vgpu-device-manager config")

// Spec is one decoded file.
type Spec struct {
	Path    string
	Configs []Config // in file order
}

// Config is one named entry of vgpu-configs: what nvidia-vgpu-dm apply -c
// NAME makes.
type Config struct {
	Name    string
	Line    int
	Entries []Entry
}

// Entry selects GPUs and says what each of them carries. The tool walks
// the entries in order and, for each, every GPU it selects, so a later
// entry's types replace an earlier one's on a GPU both select.
type Entry struct {
	Line int
	// DeviceFilter are PCI ids as the tool writes them, device before
	// vendor ("0x1EB810DE"; with a subsystem, "0x1EB810DE:0x12A210DE"); a
	// GPU matching any is selected. None selects every GPU.
	DeviceFilter []string
	// AllDevices selects every GPU; else Devices are indexes among the
	// host's NVIDIA GPUs in PCI address order (go-nvlib's nvpci).
	AllDevices bool
	Devices    []int
	// VGPUDevices are the types to make on each GPU selected, in file
	// order; none means every vGPU of the GPU is deleted.
	VGPUDevices []TypeCount
}

// TypeCount is one item of vgpu-devices: Count vGPUs of Type.
type TypeCount struct {
	Type  VGPUType
	Count int
	Line  int
}

// Decode reads a vgpu-device-manager config. file names it in messages.
func Decode(file string, data []byte) (*Spec, error) {
	d := &decoder{strictyaml.New(file, ErrInvalid)}
	s := d.spec(data)
	if err := d.Err(); err != nil {
		return nil, err
	}
	s.Path = file
	return s, nil
}

// Select is the config called name, or the only one when name is "", as
// nvidia-vgpu-dm's -c (GetSelectedVGPUConfig).
func (s *Spec) Select(name string) (Config, error) {
	names := make([]string, len(s.Configs))
	for i, c := range s.Configs {
		names[i] = c.Name
		if c.Name == name || name == "" && len(s.Configs) == 1 {
			return c, nil
		}
	}
	if len(names) == 0 {
		return Config{}, fmt.Errorf("%s has no vgpu-configs", s.Path)
	}
	if name == "" {
		return Config{}, fmt.Errorf("%s has %d vgpu-configs; name one (--config NAME): %s", s.Path, len(names), strings.Join(names, ", "))
	}
	return Config{}, fmt.Errorf("%s has no vgpu-config %s; it has %s", s.Path, strictyaml.Quote(name), strings.Join(names, ", "))
}

type decoder struct{ *strictyaml.Walker }

const (
	topRule     = "version, vgpu-configs"
	entryRule   = "device-filter, devices, vgpu-devices"
	devicesRule = `"all", or a list of GPU indexes such as [0, 1]`
	filterRule  = `a PCI id as the tool writes it, device then vendor, e.g. "0x1EB810DE", or a list of them`
	countRule   = "a whole number above 0"
	typeRule    = "a vGPU type as NVIDIA names it, without the board's brand: T4-4Q, A100-2-10C, DC-1-24CGFX"
)

func (d *decoder) spec(data []byte) *Spec {
	s := &Spec{}
	root := d.Document(data, "version: v1")
	if root == nil {
		return s
	}
	top := d.mapping(root, "")
	if top == nil {
		return s
	}
	var version, configs *yaml.Node
	for _, p := range top {
		switch p.key.Value {
		case "version":
			version = p.val
		case "vgpu-configs":
			configs = p.val
		default:
			d.Fail(p.key.Line, strictyaml.Quote(p.key.Value), "unexpected field", topRule)
		}
	}
	switch {
	case version == nil:
		d.Fail(root.Line, "version", "missing", Version)
	case version.ShortTag() != "!!str" || version.Value != Version:
		d.Fail(version.Line, "version", "unknown version "+strictyaml.Quote(version.Value), Version)
	}
	if configs == nil {
		return s // valid to the tool; there is nothing to select
	}
	cs := d.mapping(configs, "vgpu-configs")
	if cs != nil && len(cs) == 0 {
		d.Fail(configs.Line, "vgpu-configs", "at least one entry is required", "a mapping of config names to lists of entries")
	}
	for _, p := range cs {
		path := "vgpu-configs." + strictyaml.Quote(p.key.Value)
		c := Config{Name: p.key.Value, Line: p.key.Line}
		items, ok := d.list(p.val, path)
		if ok && len(items) == 0 {
			d.Fail(p.key.Line, path, "at least one entry is required", "a list of entries with "+entryRule)
		}
		for i, item := range items {
			c.Entries = append(c.Entries, d.entry(item, fmt.Sprintf("%s[%d]", path, i)))
		}
		s.Configs = append(s.Configs, c)
	}
	return s
}

func (d *decoder) entry(n *yaml.Node, path string) Entry {
	e := Entry{Line: n.Line}
	fields := d.mapping(n, path)
	if fields == nil {
		return e
	}
	seen := map[string]bool{}
	for _, p := range fields {
		field := strictyaml.Join(path, p.key.Value)
		seen[p.key.Value] = true
		switch p.key.Value {
		case "device-filter":
			e.DeviceFilter = d.filter(p.val, field)
		case "devices":
			e.AllDevices, e.Devices = d.devices(p.val, field)
		case "vgpu-devices":
			e.VGPUDevices = d.vgpuDevices(p.val, field)
		default:
			d.Fail(p.key.Line, field, "unexpected field", entryRule)
		}
	}
	for _, k := range []string{"devices", "vgpu-devices"} {
		if !seen[k] {
			d.Fail(n.Line, strictyaml.Join(path, k), "missing required field", "")
		}
	}
	return e
}

func (d *decoder) filter(n *yaml.Node, path string) []string {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil // JSON null reads as "": no filter
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		if n.Value == "" {
			return nil // the tool's "no filter"
		}
		return []string{n.Value}
	}
	if n.Kind == yaml.SequenceNode {
		var out []string
		for i, item := range n.Content {
			item = resolve(item)
			if item.Kind != yaml.ScalarNode || item.ShortTag() != "!!str" {
				d.Fail(item.Line, fmt.Sprintf("%s[%d]", path, i), strictyaml.KindOf(item)+" is not a string (quote it)", filterRule)
				continue
			}
			out = append(out, item.Value)
		}
		return out
	}
	d.Fail(n.Line, path, strictyaml.KindOf(n)+" is neither a string nor a list of strings (quote ids: 0x... unquoted is a number)", filterRule)
	return nil
}

func (d *decoder) devices(n *yaml.Node, path string) (all bool, idx []int) {
	n = resolve(n)
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		if n.Value != "all" {
			d.Fail(n.Line, path, "invalid string input "+strictyaml.Quote(n.Value), devicesRule)
		}
		return true, nil
	case n.Kind == yaml.SequenceNode:
		idx = []int{}
		for i, item := range n.Content {
			v, ok := d.int(item, fmt.Sprintf("%s[%d]", path, i), devicesRule)
			if ok {
				idx = append(idx, v)
			}
		}
		return false, idx
	}
	d.Fail(n.Line, path, strictyaml.KindOf(n)+" is neither \"all\" nor a list", devicesRule)
	return false, nil
}

func (d *decoder) vgpuDevices(n *yaml.Node, path string) []TypeCount {
	if r := resolve(n); r.Kind == yaml.ScalarNode && r.ShortTag() == "!!null" {
		return nil // JSON null: an empty config, as the tool reads it
	}
	var out []TypeCount
	migBacked, timeSliced := false, false
	for _, p := range d.mapping(n, path) {
		field := strictyaml.Join(path, strictyaml.Quote(p.key.Value))
		t, err := ParseVGPUType(p.key.Value)
		if err != nil {
			d.Fail(p.key.Line, field, err.Error(), typeRule)
			continue
		}
		c, ok := d.int(p.val, field, countRule)
		if !ok {
			continue
		}
		if c <= 0 {
			d.Fail(p.val.Line, field, fmt.Sprintf("invalid count %d", c), countRule)
			continue
		}
		if t.MIGBacked() && timeSliced || !t.MIGBacked() && migBacked {
			d.Fail(p.key.Line, field, "cannot mix time-sliced and MIG-backed vGPU devices on the same GPU", "")
			continue
		}
		migBacked, timeSliced = migBacked || t.MIGBacked(), timeSliced || !t.MIGBacked()
		out = append(out, TypeCount{Type: t, Count: c, Line: p.key.Line})
	}
	return out
}

func (d *decoder) int(n *yaml.Node, path, allowed string) (int, bool) {
	n = resolve(n)
	var v int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		what := strictyaml.KindOf(n)
		if n.ShortTag() == "!!str" {
			what = fmt.Sprintf("the string %q", n.Value)
		}
		d.Fail(n.Line, path, what+" is not a whole number", allowed)
		return 0, false
	}
	return v, true
}

func (d *decoder) list(n *yaml.Node, path string) ([]*yaml.Node, bool) {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.Fail(n.Line, path, strictyaml.KindOf(n)+" is not a list", "a list of entries with "+entryRule)
		return nil, false
	}
	return n.Content, true
}

type pair struct{ key, val *yaml.Node }

// mapping returns n's pairs in order, as the tool's YAML reader (go-yaml
// v2 through sigs.k8s.io/yaml) takes them: aliases followed, merge keys
// (<<) merged under the keys written, a key given twice refused; nil
// after reporting a node that is no mapping.
func (d *decoder) mapping(n *yaml.Node, path string) []pair {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.Fail(n.Line, path, strictyaml.KindOf(n)+" is not a mapping", "")
		return nil
	}
	out := []pair{}
	at := map[string]int{}
	var merged []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" {
			for _, m := range mergeSources(v) {
				merged = append(merged, d.mapping(m, path)...)
			}
			continue
		}
		if first, dup := at[k.Value]; dup {
			d.Fail(k.Line, strictyaml.Join(path, strictyaml.Quote(k.Value)), fmt.Sprintf("is given twice (first on line %d)", out[first].key.Line), "each key once")
			continue
		}
		at[k.Value] = len(out)
		out = append(out, pair{k, v})
	}
	for _, p := range merged {
		if _, written := at[p.key.Value]; !written {
			at[p.key.Value] = len(out)
			out = append(out, p)
		}
	}
	return out
}

func mergeSources(v *yaml.Node) []*yaml.Node {
	v = resolve(v)
	if v.Kind == yaml.SequenceNode {
		return slices.Clone(v.Content)
	}
	return []*yaml.Node{v}
}

// resolve follows an alias to its anchor's node.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// VGPUType is a vGPU type name as the tool parses it (pkg/types
// ParseVGPUType): time-sliced <gpu>-<gb><series> (T4-4Q, RTX6000-Ada-8Q)
// or MIG-backed <gpu>-<g>-<gb><series>[attr] (A100-2-10C, DC-1-24CGFX).
type VGPUType struct {
	Name   string
	GPU    string
	G      int // GPU instance slices; 0 for a time-sliced type
	GB     int // framebuffer in GB; 0 is 512 MB (M60-0Q)
	Series byte
	Attr   string // ME, NOME, MEALL, GFX, or ""
}

// MIGBacked reports whether the type runs on a MIG GPU instance.
func (t VGPUType) MIGBacked() bool { return t.G > 0 }

func (t VGPUType) String() string { return t.Name }

// ParseVGPUType reads a type name with the tool's two patterns.
func ParseVGPUType(s string) (VGPUType, error) {
	if s == "" {
		return VGPUType{}, errors.New("empty vGPU type string")
	}
	timeSliced := regexp.MustCompile(`^(?P<GPU>[A-Z0-9]+(-([a-zA-Z]+))*)-(?P<GB>0|[1-9][0-9]*)(?P<S>A|B|C|Q)$`)
	migBacked := regexp.MustCompile(`^(?P<GPU>[A-Z0-9]+)-(?P<G>[1-9])-(?P<GB>0|[1-9][0-9]*)(?P<S>A|B|C|Q)(?P<ATTR>(ME|NOME|MEALL|GFX))?$`)
	re := timeSliced
	m := re.FindStringSubmatch(s)
	if m == nil {
		re = migBacked
		m = re.FindStringSubmatch(s)
	}
	if m == nil {
		return VGPUType{}, fmt.Errorf("malformed vGPU type string %s", strictyaml.Quote(s))
	}
	group := func(name string) string { return m[re.SubexpIndex(name)] }
	t := VGPUType{Name: s, GPU: group("GPU"), Series: group("S")[0]}
	var err error
	if t.GB, err = strconv.Atoi(group("GB")); err != nil {
		return VGPUType{}, fmt.Errorf("malformed number for framebuffer size in %s", s)
	}
	if re == migBacked {
		t.G, _ = strconv.Atoi(group("G")) // [1-9]
		t.Attr = group("ATTR")
	}
	return t, nil
}

// DeviceID is a device-filter id: device and vendor, and optionally the
// subsystem's, as the tool parses it (types.NewDeviceIDFromString).
type DeviceID struct {
	Device, Vendor                   uint16
	SubsystemDevice, SubsystemVendor uint16
	HasSubsystem                     bool
}

// ParseDeviceID reads "0x1EB810DE" or "0x1EB810DE:0x12A210DE" (any base
// strconv.ParseUint takes with base 0). The tool ignores an id it cannot
// parse, which then matches no GPU; here it is an error.
func ParseDeviceID(s string) (DeviceID, error) {
	parts := strings.Split(s, ":")
	if len(parts) > 2 {
		return DeviceID{}, fmt.Errorf("invalid device id %s: want <devicevendor> or <devicevendor>:<subdevicevendor>", strictyaml.Quote(s))
	}
	raw, err := strconv.ParseUint(parts[0], 0, 32)
	if err != nil {
		return DeviceID{}, fmt.Errorf("invalid device id %s: %s is not a 32-bit number", strictyaml.Quote(s), strictyaml.Quote(parts[0]))
	}
	id := DeviceID{Device: uint16(raw >> 16), Vendor: uint16(raw)}
	if len(parts) == 2 {
		sub, err := strconv.ParseUint(parts[1], 0, 32)
		if err != nil {
			return DeviceID{}, fmt.Errorf("invalid device id %s: subsystem %s is not a 32-bit number", strictyaml.Quote(s), strictyaml.Quote(parts[1]))
		}
		id.SubsystemDevice, id.SubsystemVendor, id.HasSubsystem = uint16(sub>>16), uint16(sub), true
	}
	return id, nil
}

// PCIID is the id as lspci -n prints it: vendor:device.
func (id DeviceID) PCIID() string { return fmt.Sprintf("%04x:%04x", id.Vendor, id.Device) }
