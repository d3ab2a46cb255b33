package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

const fullDoc = `version: v1
gpus:
  - address: "0000:03:00.0"
    profile: mi25-4g
  - id: 10de:1eb8
    profile: t4-4q
  - all: true
    profile: l40s-12q
  - parent: mbochs
    profile: lab-mbochs-64m
    mdev-uuids: [2F1E0D9C-8B7A-4C6D-9E5F-4A3B2C1D0E9F]
  - address: "0000:3b:00.0"
    profile: t4-4q
    mdev-uuids:
      - 6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44
      - a1b2c3d4-0000-4000-8000-00000000000a
socket:
  group: kvm
on-release: destroy
metrics:
  listen: "127.0.0.1:9470"
`

func TestParseValid(t *testing.T) {
	c, err := Parse("config.yaml", []byte(fullDoc))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Address: pci.MustParseAddress("0000:03:00.0"), Profile: "mi25-4g"},
		{ID: PCIID{0x10de, 0x1eb8}, Profile: "t4-4q"},
		{All: true, Profile: "l40s-12q"},
		{Parent: "mbochs", Profile: "lab-mbochs-64m", MdevUUIDs: []string{"2f1e0d9c-8b7a-4c6d-9e5f-4a3b2c1d0e9f"}},
		{Address: pci.MustParseAddress("0000:3b:00.0"), Profile: "t4-4q",
			MdevUUIDs: []string{"6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44", "a1b2c3d4-0000-4000-8000-00000000000a"}},
	}
	if len(c.GPUs) != len(want) {
		t.Fatalf("gpus = %+v", c.GPUs)
	}
	for i := range want {
		if !reflect.DeepEqual(c.GPUs[i], want[i]) {
			t.Errorf("gpus[%d] = %+v, want %+v", i, c.GPUs[i], want[i])
		}
	}
	if c.Socket.Group != "kvm" || c.OnRelease != ReleaseDestroy || c.Metrics.Listen != "127.0.0.1:9470" || c.Version != Version {
		t.Errorf("config = %+v", c)
	}
	if c.Path != "config.yaml" || c.Line("gpus[1].profile") != 6 || c.Line("gpus[4].mdev-uuids[1]") != 16 || c.Line("gpus[2]") != 7 || c.Line("gpus[2].nothing") != 7 {
		t.Errorf("path %q, lines %v", c.Path, c.lines)
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse("c.yaml", []byte("version: v1\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := Default()
	if c.Socket != d.Socket || c.OnRelease != ReleaseKeep || c.Metrics.Listen != "" || len(c.GPUs) != 0 {
		t.Errorf("config = %+v", c)
	}
	c, err = Parse("c.yaml", []byte("version: v1\nmetrics:\n  listen: \"\"\nsocket:\n  group: \"107\"\n"))
	if err != nil || c.Metrics.Listen != "" || c.Socket.Group != "107" {
		t.Errorf("config = %+v, %v", c, err)
	}
}

// want is one FieldError a bad file must produce.
type want struct {
	line    int
	field   string
	problem string // substring
	allowed string // substring; "" asserts nothing
}

// Two mdev UUIDs for the pinning tests.
const (
	u1 = "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44"
	u2 = "a1b2c3d4-0000-4000-8000-00000000000a"
)

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		want []want
	}{
		{"empty file", "", []want{{0, "", "the file is empty", "version: v1"}}},
		{"only a comment", "# nothing\n", []want{{0, "", "the file is empty", "version: v1"}}},
		{"not a mapping", "- a\n", []want{{1, "", "is a list, not a mapping", "version, gpus, socket, on-release, metrics"}}},
		{"syntax", "version: v1\ngpus: [\n", []want{{2, "", "invalid YAML", ""}}},
		{"two documents", "version: v1\n---\nversion: v1\n", []want{{2, "", "a second YAML document", "one document per file"}}},
		{"missing version", "on-release: keep\n", []want{{1, "version", "missing", "v1"}}},
		{"wrong version", "version: v2\n", []want{{1, "version", "v2 is not a version", "v1"}}},
		{"unknown field", "version: v1\nonrelease: keep\n", []want{{2, "onrelease", "unknown field", "version, gpus, socket, on-release, metrics"}}},
		{"duplicate field", "version: v1\non-release: keep\non-release: destroy\n", []want{{3, "on-release", "given twice (first on line 2)", "each field once"}}},
		{"gpus not a list", "version: v1\ngpus:\n  address: 03:00.0\n", []want{{3, "gpus", "is a mapping, not a list", "a list of entries"}}},
		{"gpus empty", "version: v1\ngpus: []\n", []want{{2, "gpus", "is an empty list", "leave gpus out"}}},
		{"gpus null", "version: v1\ngpus:\n", []want{{2, "gpus", "is empty, not a list", "a list of entries"}}},
		{"entry not a mapping", "version: v1\ngpus:\n  - 03:00.0\n", []want{{3, "gpus[0]", "not a mapping", "address, id, all, parent, profile"}}},
		{"entry unknown field", "version: v1\ngpus:\n  - adress: 03:00.0\n    profile: mi25-4g\n", []want{
			{3, "gpus[0].adress", "unknown field", "address, id, all, parent, profile"},
			{3, "gpus[0]", "selects no GPU", "exactly one of address, id, all"},
		}},
		{"two selectors", "version: v1\ngpus:\n  - address: 03:00.0\n    id: 1002:6860\n    profile: mi25-4g\n", []want{
			{4, "gpus[0]", "gives both address and id", "exactly one of address, id, all"},
		}},
		{"bad address", "version: v1\ngpus:\n  - address: 03:00\n    profile: mi25-4g\n", []want{
			{3, "gpus[0].address", `invalid PCI address "03:00"`, ""},
		}},
		{"bad id", "version: v1\ngpus:\n  - id: 10de-1eb8\n    profile: t4-4q\n", []want{
			{3, "gpus[0].id", "10de-1eb8 is not a PCI id", "vendor:device in hex"},
		}},
		{"short id", "version: v1\ngpus:\n  - id: 10de:1eb\n    profile: t4-4q\n", []want{
			{3, "gpus[0].id", "10de:1eb is not a PCI id", "e.g. 10de:1eb8"},
		}},
		{"parent and all", "version: v1\ngpus:\n  - parent: mbochs\n    all: true\n    profile: lab-mbochs-64m\n", []want{
			{3, "gpus[0]", "gives both all and parent", "exactly one of address, id, all, parent"},
		}},
		{"parent a PCI address", "version: v1\ngpus:\n  - parent: \"0000:03:00.0\"\n    profile: mi25-4g\n", []want{
			{3, "gpus[0].parent", "0000:03:00.0 is not an mdev parent name", "virtual mdev parent"},
		}},
		{"parent a path", "version: v1\ngpus:\n  - parent: ../mbochs\n    profile: lab-mbochs-64m\n", []want{
			{3, "gpus[0].parent", "is not an mdev parent name", "e.g. mbochs"},
		}},
		{"same parent twice", "version: v1\ngpus:\n  - parent: mbochs\n    profile: lab-mbochs-64m\n  - parent: mbochs\n    profile: lab-mbochs-16m\n", []want{
			{5, "gpus[1].parent", "selects what gpus[0] (line 3) selects", "one entry per GPU"},
		}},
		{"all false", "version: v1\ngpus:\n  - all: false\n    profile: t4-4q\n", []want{
			{3, "gpus[0].all", "false selects no GPU", "true"},
		}},
		{"all not a bool", "version: v1\ngpus:\n  - all: yes\n    profile: t4-4q\n", []want{
			{3, "gpus[0].all", "yes is not true or false", "true"},
		}},
		{"profile missing", "version: v1\ngpus:\n  - all: true\n", []want{
			{3, "gpus[0].profile", "missing", "a profile name"},
		}},
		{"profile empty", "version: v1\ngpus:\n  - all: true\n    profile:\n", []want{
			{4, "gpus[0].profile", "is empty", "a profile name"},
		}},
		{"profile a list", "version: v1\ngpus:\n  - all: true\n    profile: [a, b]\n", []want{
			{4, "gpus[0].profile", "is a list, not a value", "a profile name"},
		}},
		{"same address twice", "version: v1\ngpus:\n  - address: 03:00.0\n    profile: mi25-4g\n  - address: 0000:03:00.0\n    profile: mi25-2g\n", []want{
			{5, "gpus[1].address", "selects what gpus[0] (line 3) selects", "one entry per GPU"},
		}},
		{"same id twice", "version: v1\ngpus:\n  - id: 10de:1eb8\n    profile: t4-4q\n  - id: 10DE:1EB8\n    profile: t4-2q\n", []want{
			{5, "gpus[1].id", "selects what gpus[0] (line 3) selects", "one entry per GPU"},
		}},
		{"socket not a mapping", "version: v1\nsocket: libvirt\n", []want{{2, "socket", "is the value libvirt, not a mapping", "a mapping of group"}}},
		{"socket unknown field", "version: v1\nsocket:\n  mode: 0660\n", []want{{3, "socket.mode", "unknown field", "group"}}},
		{"bad group", "version: v1\nsocket:\n  group: lib virt\n", []want{{3, "socket.group", `"lib virt" is not a group name`, "a group name"}}},
		{"empty group", "version: v1\nsocket:\n  group: \"\"\n", []want{{3, "socket.group", `"" is not a group name`, "numeric gid"}}},
		{"bad release policy", "version: v1\non-release: delete\n", []want{{2, "on-release", "delete is not a release policy", "keep, destroy"}}},
		{"release policy a number", "version: v1\non-release: 1\n", []want{{2, "on-release", "1 is not a release policy", "keep, destroy"}}},
		{"listen without port", "version: v1\nmetrics:\n  listen: localhost\n", []want{{3, "metrics.listen", "localhost is not host:port", "127.0.0.1:9470"}}},
		{"listen bad port", "version: v1\nmetrics:\n  listen: \":99999\"\n", []want{{3, "metrics.listen", "has no port number", `"" serves no metrics`}}},
		{"metrics unknown field", "version: v1\nmetrics:\n  path: /metrics\n", []want{{3, "metrics.path", "unknown field", "listen"}}},
		{"alias", "version: v1\ngpus:\n  - all: true\n    profile: &p t4-4q\n  - address: 03:00.0\n    profile: *p\n", []want{
			{6, "gpus[1].profile", "is an alias (*p)", "anchors and aliases are not supported"},
		}},
		{"mdev-uuids on an id entry", "version: v1\ngpus:\n  - id: 10de:1eb8\n    profile: t4-4q\n    mdev-uuids: [" + u1 + "]\n", []want{
			{5, "gpus[0].mdev-uuids", "is given with id, which may select several GPUs", "on an entry with address or parent"},
		}},
		{"mdev-uuids on an all entry", "version: v1\ngpus:\n  - all: true\n    profile: t4-4q\n    mdev-uuids: [" + u1 + "]\n", []want{
			{5, "gpus[0].mdev-uuids", "is given with all", "address or parent"},
		}},
		{"mdev-uuids not a list", "version: v1\ngpus:\n  - address: 3b:00.0\n    profile: t4-4q\n    mdev-uuids: " + u1 + "\n", []want{
			{5, "gpus[0].mdev-uuids", "not a list", "a list of mdev UUIDs"},
		}},
		{"mdev-uuids empty", "version: v1\ngpus:\n  - address: 3b:00.0\n    profile: t4-4q\n    mdev-uuids: []\n", []want{
			{5, "gpus[0].mdev-uuids", "is an empty list", "leave mdev-uuids out"},
		}},
		{"mdev-uuids not UUIDs", "version: v1\ngpus:\n  - address: 3b:00.0\n    profile: t4-4q\n    mdev-uuids:\n      - " + u1 + "\n      - {" + u2 + "}\n      - 6b9d4f2a3c1e4f5a9b7d2e8c1a0f3d44\n      - 6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d4g\n", []want{
			{7, "gpus[0].mdev-uuids[1]", "is a mapping, not a value", "8-4-4-4-12 hex digits"},
			{8, "gpus[0].mdev-uuids[2]", "6b9d4f2a3c1e4f5a9b7d2e8c1a0f3d44 is not a UUID", "8-4-4-4-12 hex digits"},
			{9, "gpus[0].mdev-uuids[3]", "is not a UUID", "e.g. 6b9d4f2a-"},
		}},
		{"mdev UUID twice in an entry", "version: v1\ngpus:\n  - address: 3b:00.0\n    profile: t4-4q\n    mdev-uuids:\n      - " + u1 + "\n      - " + strings.ToUpper(u1) + "\n", []want{
			{7, "gpus[0].mdev-uuids[1]", u1 + " is given twice (first on line 6)", "each mdev UUID once"},
		}},
		{"mdev UUID in two entries", "version: v1\ngpus:\n  - address: 3b:00.0\n    profile: t4-4q\n    mdev-uuids: [" + u1 + ", " + u2 + "]\n" +
			"  - parent: mbochs\n    profile: lab-mbochs-64m\n    mdev-uuids:\n      - " + u2 + "\n", []want{
			{9, "gpus[1].mdev-uuids", u2 + " is pinned by gpus[0] (line 5) too", "each mdev UUID once in the file"},
		}},
		{"custom tag", "version: v1\non-release: !policy keep\n", []want{{2, "on-release", "has the tag !policy", "untagged values"}}},
		{"kubernetes not a mapping", "version: v1\nkubernetes: true\n", []want{{2, "kubernetes", "is the value true, not a mapping", "device-plugin, resource-domain"}}},
		{"kubernetes unknown field", "version: v1\nkubernetes:\n  plugin: true\n", []want{{3, "kubernetes.plugin", "unknown field", "device-plugin, resource-domain, nvidia-resource-names"}}},
		{"device plugin without a domain", "version: v1\nkubernetes:\n  device-plugin: true\n", []want{
			{3, "kubernetes.resource-domain", "missing", "a DNS subdomain"},
		}},
		{"device plugin not a bool", "version: v1\nkubernetes:\n  device-plugin: \"yes\"\n  resource-domain: vgpu.example.org\n", []want{
			{3, "kubernetes.device-plugin", "yes is not true or false", "true or false"},
		}},
		{"resource domain upper case", "version: v1\nkubernetes:\n  device-plugin: true\n  resource-domain: VGPU.example.org\n", []want{
			{4, "kubernetes.resource-domain", "VGPU.example.org is not a DNS subdomain", "lower case"},
		}},
		{"resource domain with a slash", "version: v1\nkubernetes:\n  resource-domain: vgpu.example.org/x\n", []want{
			{3, "kubernetes.resource-domain", "is not a DNS subdomain", ""},
		}},
		{"resource domain of Kubernetes", "version: v1\nkubernetes:\n  device-plugin: true\n  resource-domain: vgpu.kubernetes.io\n", []want{
			{4, "kubernetes.resource-domain", "Kubernetes' own namespace", ""},
		}},
		{"resource domain too long", "version: v1\nkubernetes:\n  resource-domain: " + strings.Repeat("a.", 122) + "io\n", []want{
			{3, "kubernetes.resource-domain", "is longer than 244 characters", ""},
		}},
		{"relative plugin dir", "version: v1\nkubernetes:\n  device-plugin-dir: var/lib/kubelet\n  pod-resources-socket: kubelet.sock\n", []want{
			{3, "kubernetes.device-plugin-dir", "var/lib/kubelet is not an absolute path", "an absolute path"},
			{4, "kubernetes.pod-resources-socket", "kubelet.sock is not an absolute path", "an absolute path"},
		}},
		{"every problem, in file order", "on-release: never\nsocket:\n  group: \"a b\"\ngpus:\n  - profile: x\n", []want{
			{1, "version", "missing", "v1"},
			{1, "on-release", "never is not a release policy", "keep, destroy"},
			{3, "socket.group", "is not a group name", ""},
			{5, "gpus[0]", "selects no GPU", ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("/etc/vgpud/config.yaml", []byte(tc.doc))
			if err == nil {
				t.Fatalf("no error; config %+v", c)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not match ErrInvalid: %v", err)
			}
			checkFieldErrors(t, err, "/etc/vgpud/config.yaml", tc.want)
		})
	}
}

// checkFieldErrors asserts err is exactly the FieldErrors of want, each
// message starting FILE:LINE: FIELD.
func checkFieldErrors(t *testing.T, err error, file string, want []want) {
	t.Helper()
	got := fieldErrors(err)
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i, w := range want {
		g := got[i]
		if g.File != file || g.Line != w.line || g.Field != w.field ||
			!strings.Contains(g.Problem, w.problem) || !strings.Contains(g.Allowed, w.allowed) {
			t.Errorf("error %d = {line %d, field %q, problem %q, allowed %q}\nwant {line %d, field %q, problem ~%q, allowed ~%q}",
				i, g.Line, g.Field, g.Problem, g.Allowed, w.line, w.field, w.problem, w.allowed)
		}
		prefix := file
		if w.line > 0 {
			prefix += fmt.Sprintf(":%d", w.line)
		}
		prefix += ": "
		if w.field != "" {
			prefix += w.field + ": "
		}
		if msg := g.Error(); !strings.HasPrefix(msg, prefix) || (g.Allowed != "" && !strings.HasSuffix(msg, "; allowed: "+g.Allowed)) {
			t.Errorf("message %q does not read FILE:LINE: FIELD: PROBLEM; allowed: ...", msg)
		}
	}
}

// fieldErrors flattens errors.Join's tree.
func fieldErrors(err error) []*FieldError {
	if fe, ok := err.(*FieldError); ok {
		return []*FieldError{fe}
	}
	var out []*FieldError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, fieldErrors(e)...)
		}
	}
	return out
}

func TestParseKubernetes(t *testing.T) {
	c, err := Parse("c.yaml", []byte("version: v1\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Kubernetes{DevicePluginDir: "/var/lib/kubelet/device-plugins", PodResourcesSocket: "/var/lib/kubelet/pod-resources/kubelet.sock"}
	if c.Kubernetes != want {
		t.Errorf("defaults: kubernetes = %+v, want %+v", c.Kubernetes, want)
	}
	c, err = Parse("c.yaml", []byte(`version: v1
kubernetes:
  device-plugin: true
  resource-domain: vgpu.example.org
  nvidia-resource-names: true
  device-plugin-dir: /tmp/kubelet/device-plugins/
  pod-resources-socket: /tmp/kubelet/pod-resources/kubelet.sock
`))
	if err != nil {
		t.Fatal(err)
	}
	want = Kubernetes{DevicePlugin: true, ResourceDomain: "vgpu.example.org", NVIDIAResourceNames: true,
		DevicePluginDir: "/tmp/kubelet/device-plugins", PodResourcesSocket: "/tmp/kubelet/pod-resources/kubelet.sock"}
	if c.Kubernetes != want {
		t.Errorf("kubernetes = %+v, want %+v", c.Kubernetes, want)
	}
	// Off with a domain is fine: it takes effect when turned on.
	if _, err := Parse("c.yaml", []byte("version: v1\nkubernetes:\n  device-plugin: false\n  resource-domain: a-b.c\n")); err != nil {
		t.Error(err)
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if _, err := Load(path); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte("version: v1\non-release: nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.HasPrefix(err.Error(), path+":2: on-release:") {
		t.Errorf("bad file: %v", err)
	}
}

func TestParsePCIID(t *testing.T) {
	id, err := ParsePCIID("10DE:1eb8")
	if err != nil || id != (PCIID{0x10de, 0x1eb8}) || id.String() != "10de:1eb8" {
		t.Errorf("ParsePCIID = %v, %v", id, err)
	}
	for _, bad := range []string{"", "10de", "10de:", "10de:1eb8:0", "0x10de:1eb8", "10de:1eb8 ", "g0de:1eb8"} {
		if _, err := ParsePCIID(bad); err == nil {
			t.Errorf("ParsePCIID(%q) did not fail", bad)
		}
	}
	var back PCIID
	if err := back.UnmarshalText([]byte(id.String())); err != nil || back != id {
		t.Errorf("round trip = %v, %v", back, err)
	}
}

// TestDocExamples keeps docs/config.md and examples/config.yaml honest:
// every config they show must parse.
func TestDocExamples(t *testing.T) {
	md, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(md), -1)
	if len(blocks) < 4 {
		t.Fatalf("found %d yaml blocks in docs/config.md", len(blocks))
	}
	for i, b := range blocks {
		if _, err := Parse("docs/config.md block "+string(rune('1'+i)), []byte(b[1])); err != nil {
			t.Error(err)
		}
	}
	if _, err := Load("../../examples/config.yaml"); err != nil {
		t.Error(err)
	}
}
