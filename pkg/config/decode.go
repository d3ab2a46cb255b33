package config

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-project/vgpu/internal/strictyaml"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Keys of each mapping, in the order messages list them.
func topKeys() []string {
	return []string{"version", "gpus", "socket", "on-release", "metrics", "kubernetes"}
}
func kubernetesKeys() []string {
	return []string{"device-plugin", "resource-domain", "nvidia-resource-names", "device-plugin-dir", "pod-resources-socket"}
}
func entryKeys() []string    { return []string{"address", "id", "all", "parent", "profile", "mdev-uuids"} }
func selectorKeys() []string { return []string{"address", "id", "all", "parent"} }

// What each value may be, for messages.
const (
	entriesRule = "a list of entries, each with one of address, id, all, parent and a profile"
	oneSelector = "exactly one of address, id, all, parent"
	idRule      = "vendor:device in hex as lspci -n prints it, e.g. 10de:1eb8"
	profileRule = "a profile name from the catalog (vgpuctl profiles), e.g. mi25-4g"
	groupRule   = "a group name, e.g. libvirt, or a numeric gid"
	listenRule  = `host:port, e.g. 127.0.0.1:9470 or :9470; "" serves no metrics`
	boolRule    = "true or false"
	domainRule  = "a DNS subdomain the cluster's admin owns, e.g. vgpu.example.org (lower case, not under kubernetes.io)"
	pathRule    = "an absolute path"
	uuidsRule   = "a list of mdev UUIDs, e.g. [6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44], each once in the file, on an address or parent entry"
	uuidRule    = "a UUID as 8-4-4-4-12 hex digits, e.g. 6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44"
)

// isGroupName: what useradd and groupadd accept, a little widened (upper
// case, dots) as distributions do: [A-Za-z_][A-Za-z0-9_.-]{0,31}, then an
// optional $.
func isGroupName(s string) bool {
	return nameOf(strings.TrimSuffix(s, "$"), 32, "_.-")
}

// nameOf: s starts with a letter or _, then letters, digits and the
// punctuation in more, max bytes in all. Hand-written rather than a regexp:
// a bounded repetition compiles to one state per count, and package-level
// regexps are compiled at every start of every program that links config.
func nameOf(s string, max int, more string) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i, c := range []byte(s) {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		switch {
		case letter:
		case i > 0 && (c >= '0' && c <= '9' || strings.IndexByte(more, c) >= 0):
		default:
			return false
		}
	}
	return true
}

// Parse decodes a config strictly: unknown and duplicate fields, wrong
// types, bad values, entries that select nothing or two ways, and the same
// GPU selected twice the same way are all reported (joined, in file order)
// with the file, line, field path and what is allowed. name only labels
// the data in messages.
func Parse(name string, data []byte) (*Config, error) {
	d := &decoder{Walker: strictyaml.New(name, ErrInvalid)}
	c := d.decode(data)
	if err := d.Err(); err != nil {
		return nil, err
	}
	c.Path, c.lines = name, d.Lines
	return c, nil
}

// decoder walks a config file's YAML nodes (internal/strictyaml).
type decoder struct {
	*strictyaml.Walker
	pins []pin // every mdev UUID pinned, in file order
}

// pin is one item of an entry's mdev-uuids.
type pin struct {
	uuid, entry string
	line        int
}

func (d *decoder) decode(data []byte) *Config {
	root := d.Document(data, "a mapping starting with version: "+Version)
	if root == nil {
		return nil
	}
	m := d.Mapping(root, "", topKeys())
	if m == nil {
		return nil
	}
	c := Default()
	if n := m["version"]; n == nil {
		d.Fail(root.Line, "version", "missing", Version)
	} else if s, ok := d.Scalar(n, "version", Version); ok && s != Version {
		d.Fail(n.Line, "version", fmt.Sprintf("%s is not a version this vgpud reads", strictyaml.Quote(s)), Version)
	}
	if n := m["gpus"]; n != nil {
		items := d.List(n, "gpus", entriesRule)
		if n.Kind == yaml.SequenceNode && len(items) == 0 {
			d.Fail(n.Line, "gpus", "is an empty list", entriesRule+"; leave gpus out to manage no GPU")
		}
		for i, item := range items {
			c.GPUs = append(c.GPUs, d.entry(item, fmt.Sprintf("gpus[%d]", i)))
		}
		d.repeats(c.GPUs)
		d.pinnedTwice()
	}
	if n := m["socket"]; n != nil {
		s := d.Mapping(n, "socket", []string{"group", "admin-group"})
		for _, f := range []struct {
			key string
			to  *string
		}{{"group", &c.Socket.Group}, {"admin-group", &c.Socket.AdminGroup}} {
			g := s[f.key]
			if g == nil {
				continue
			}
			if v, ok := d.Scalar(g, "socket."+f.key, groupRule); ok {
				if _, err := strconv.ParseUint(v, 10, 32); err != nil && !isGroupName(v) {
					d.Fail(g.Line, "socket."+f.key, fmt.Sprintf("%s is not a group name", strictyaml.Quote(v)), groupRule)
				}
				*f.to = v
			}
		}
	}
	if n := m["on-release"]; n != nil {
		allowed := strings.Join(releasePolicies(), ", ")
		if v, ok := d.Scalar(n, "on-release", allowed); ok {
			if !slices.Contains(releasePolicies(), v) {
				d.Fail(n.Line, "on-release", fmt.Sprintf("%s is not a release policy", strictyaml.Quote(v)), allowed)
			}
			c.OnRelease = ReleasePolicy(v)
		}
	}
	if n := m["metrics"]; n != nil {
		if s := d.Mapping(n, "metrics", []string{"listen"}); s != nil && s["listen"] != nil {
			l := s["listen"]
			if v, ok := d.Scalar(l, "metrics.listen", listenRule); ok {
				if why := checkListen(v); why != "" {
					d.Fail(l.Line, "metrics.listen", fmt.Sprintf("%s %s", strictyaml.Quote(v), why), listenRule)
				}
				c.Metrics.Listen = v
			}
		}
	}
	if n := m["kubernetes"]; n != nil {
		d.kubernetes(n, &c.Kubernetes)
	}
	return c
}

// kubernetes decodes the kubernetes mapping into k (which holds the
// defaults).
func (d *decoder) kubernetes(n *yaml.Node, k *Kubernetes) {
	m := d.Mapping(n, "kubernetes", kubernetesKeys())
	if m == nil {
		return
	}
	for _, f := range []struct {
		key string
		to  *bool
	}{{"device-plugin", &k.DevicePlugin}, {"nvidia-resource-names", &k.NVIDIAResourceNames}} {
		if v := m[f.key]; v != nil {
			d.boolean(v, "kubernetes."+f.key, f.to)
		}
	}
	if v := m["resource-domain"]; v != nil {
		if s, ok := d.Scalar(v, "kubernetes.resource-domain", domainRule); ok {
			if why := checkResourceDomain(s); why != "" {
				d.Fail(v.Line, "kubernetes.resource-domain", fmt.Sprintf("%s %s", strictyaml.Quote(s), why), domainRule)
			}
			k.ResourceDomain = s
		}
	} else if k.DevicePlugin {
		d.Fail(n.Line, "kubernetes.resource-domain", "missing: the device plugin names its resources <resource-domain>/<profile>", domainRule)
	}
	for _, f := range []struct {
		key string
		to  *string
	}{{"device-plugin-dir", &k.DevicePluginDir}, {"pod-resources-socket", &k.PodResourcesSocket}} {
		v := m[f.key]
		if v == nil {
			continue
		}
		if s, ok := d.Scalar(v, "kubernetes."+f.key, pathRule); ok {
			if !strings.HasPrefix(s, "/") || strings.ContainsRune(s, 0) {
				d.Fail(v.Line, "kubernetes."+f.key, fmt.Sprintf("%s is not an absolute path", strictyaml.Quote(s)), pathRule)
			}
			*f.to = filepath.Clean(s)
		}
	}
}

// boolean decodes a YAML boolean.
func (d *decoder) boolean(v *yaml.Node, path string, to *bool) {
	s, ok := d.Scalar(v, path, boolRule)
	if !ok {
		return
	}
	if v.ShortTag() != "!!bool" || v.Decode(to) != nil {
		d.Fail(v.Line, path, fmt.Sprintf("%s is not true or false", strictyaml.Quote(s)), boolRule)
	}
}

// checkResourceDomain says what is wrong with a resource domain, or "".
// The kubelet registers <domain>/<name> only as an extended resource
// (IsExtendedResourceName, k8s.io/kubernetes v1.34): outside the
// kubernetes.io namespace, and "requests.<domain>" a DNS-1123 subdomain of
// at most 253 characters.
func checkResourceDomain(s string) string {
	const max = 253 - len("requests.")
	if len(s) > max {
		return fmt.Sprintf("is longer than %d characters", max)
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return "is not a DNS subdomain (an empty label, or one over 63 characters)"
		}
		for i, c := range []byte(label) {
			alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
			if !alnum && (c != '-' || i == 0 || i == len(label)-1) {
				return "is not a DNS subdomain (lower-case letters and digits, '-' inside labels, '.' between them)"
			}
		}
	}
	if strings.HasSuffix(s, "kubernetes.io") {
		return "is in Kubernetes' own namespace (kubernetes.io), where the kubelet takes no device plugin's resources"
	}
	return ""
}

// checkListen says what is wrong with a listen address, or "".
func checkListen(s string) string {
	if s == "" {
		return ""
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return "is not host:port"
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "has no port number from 0 to 65535"
	}
	return ""
}

func (d *decoder) entry(n *yaml.Node, path string) Entry {
	var e Entry
	m := d.Mapping(n, path, entryKeys())
	if m == nil {
		return e
	}
	var given []string
	for _, k := range selectorKeys() {
		if m[k] != nil {
			given = append(given, k)
		}
	}
	switch len(given) {
	case 0:
		d.Fail(n.Line, path, "selects no GPU", oneSelector)
	case 1:
	default:
		d.Fail(d.Lines[path+"."+given[1]], path, fmt.Sprintf("gives both %s and %s", given[0], given[1]), oneSelector)
	}
	if v := m["address"]; v != nil {
		if s, ok := d.Scalar(v, path+".address", "a PCI address, e.g. 0000:03:00.0"); ok {
			a, err := pci.ParseAddress(s)
			if err != nil {
				d.Fail(v.Line, path+".address", err.Error(), "")
			}
			e.Address = a
		}
	}
	if v := m["id"]; v != nil {
		if s, ok := d.Scalar(v, path+".id", idRule); ok {
			id, err := ParsePCIID(s)
			if err != nil {
				d.Fail(v.Line, path+".id", fmt.Sprintf("%s is not a PCI id", strictyaml.Quote(s)), idRule)
			}
			e.ID = id
		}
	}
	if v := m["all"]; v != nil {
		const allowed = "true (or remove the entry)"
		if s, ok := d.Scalar(v, path+".all", allowed); ok {
			switch {
			case v.ShortTag() != "!!bool":
				d.Fail(v.Line, path+".all", fmt.Sprintf("%s is not true or false", strictyaml.Quote(s)), allowed)
			case v.Decode(&e.All) == nil && !e.All:
				d.Fail(v.Line, path+".all", "false selects no GPU", allowed)
			}
		}
	}
	if v := m["parent"]; v != nil {
		if s, ok := d.Scalar(v, path+".parent", vgpu.ParentRule); ok {
			if !vgpu.ValidParentName(s) {
				d.Fail(v.Line, path+".parent", fmt.Sprintf("%s is not an mdev parent name", strictyaml.Quote(s)), vgpu.ParentRule)
			}
			e.Parent = s
		}
	}
	if v := m["profile"]; v == nil {
		d.Fail(n.Line, path+".profile", "missing", profileRule)
	} else {
		e.Profile, _ = d.Scalar(v, path+".profile", profileRule)
	}
	if v := m["mdev-uuids"]; v != nil {
		e.MdevUUIDs = d.mdevUUIDs(v, path+".mdev-uuids")
		if len(given) == 1 && given[0] != "address" && given[0] != "parent" {
			d.Fail(v.Line, path+".mdev-uuids", fmt.Sprintf("is given with %s, which may select several GPUs, and an mdev UUID names one mdev on the host", given[0]),
				"mdev-uuids on an entry with address or parent")
		}
	}
	return e
}

// mdevUUIDs reads an entry's pinned mdev UUIDs; each is lower-cased, as
// the kernel names mdevs.
func (d *decoder) mdevUUIDs(n *yaml.Node, path string) []string {
	items := d.List(n, path, uuidsRule)
	if n.Kind == yaml.SequenceNode && len(items) == 0 {
		d.Fail(n.Line, path, "is an empty list", uuidsRule+"; leave mdev-uuids out to pin none")
	}
	var out []string
	first := map[string]int{}
	for i, item := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		s, ok := d.Scalar(item, p, uuidRule)
		if !ok {
			continue
		}
		s, err := mdev.ValidateUUID(s)
		if err != nil {
			d.Fail(item.Line, p, fmt.Sprintf("%s is not a UUID", strictyaml.Quote(item.Value)), uuidRule)
			continue
		}
		if j, dup := first[s]; dup {
			d.Fail(item.Line, p, fmt.Sprintf("%s is given twice (first on line %d)", s, j), "each mdev UUID once")
			continue
		}
		first[s] = item.Line
		d.pins = append(d.pins, pin{uuid: s, entry: strings.TrimSuffix(path, ".mdev-uuids"), line: item.Line})
		out = append(out, s)
	}
	return out
}

// pinnedTwice reports an mdev UUID that two entries pin: the kernel has
// one mdev of a UUID.
func (d *decoder) pinnedTwice() {
	first := map[string]pin{}
	for _, p := range d.pins {
		f, ok := first[p.uuid]
		if !ok {
			first[p.uuid] = p
			continue
		}
		if f.entry != p.entry { // twice in one entry is reported as read
			d.Fail(p.line, p.entry+".mdev-uuids", fmt.Sprintf("%s is pinned by %s (line %d) too", p.uuid, f.entry, f.line),
				"each mdev UUID once in the file")
		}
	}
}

// repeats reports an entry selecting what an earlier one does, the same
// way. Overlaps between ways (an address and an id matching it) need the
// host's GPUs and the catalog: Desired finds those.
func (d *decoder) repeats(entries []Entry) {
	first := map[string]int{}
	for i, e := range entries {
		var key, field string
		switch {
		case !e.Address.IsZero():
			key, field = "address "+e.Address.String(), "address"
		case !e.ID.IsZero():
			key, field = "id "+e.ID.String(), "id"
		case e.All:
			key, field = "all "+e.Profile, "all"
		case e.Parent != "":
			key, field = "parent "+e.Parent, "parent"
		default:
			continue
		}
		path := fmt.Sprintf("gpus[%d].%s", i, field)
		if j, ok := first[key]; ok {
			d.Fail(d.Lines[path], path, fmt.Sprintf("selects what gpus[%d] (line %d) selects", j, d.Lines[fmt.Sprintf("gpus[%d]", j)]),
				"one entry per GPU")
			continue
		}
		first[key] = i
	}
}
