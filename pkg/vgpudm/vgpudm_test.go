package vgpudm_test

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/vgpudm"
)

func decodeFile(t *testing.T, name string) *vgpudm.Spec {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := vgpudm.Decode(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDecodeExamples reads the tool's own examples whole.
func TestDecodeExamples(t *testing.T) {
	s := decodeFile(t, "config-example.yaml")
	if len(s.Configs) != 711 {
		t.Errorf("%d configs in config-example.yaml, want 711", len(s.Configs))
	}
	c, err := s.Select("A10-4Q")
	if err != nil || len(c.Entries) != 1 || !c.Entries[0].AllDevices || len(c.Entries[0].VGPUDevices) != 1 {
		t.Fatalf("A10-4Q: %+v, %v", c, err)
	}
	if tc := c.Entries[0].VGPUDevices[0]; tc.Type.Name != "A10-4Q" || tc.Count != 6 || tc.Type.GB != 4 || tc.Type.Series != 'Q' || tc.Type.MIGBacked() {
		t.Errorf("A10-4Q's type: %+v", tc)
	}
	mig, err := s.Select("A100-1-5C")
	if err != nil || mig.Entries[0].VGPUDevices[0].Count != 7 || mig.Entries[0].VGPUDevices[0].Type.G != 1 {
		t.Errorf("A100-1-5C: %+v, %v", mig, err)
	}
	def, err := s.Select("default")
	if err != nil || len(def.Entries) < 2 {
		t.Fatalf("default: %+v, %v", def, err)
	}
	if e := def.Entries[0]; !reflect.DeepEqual(e.DeviceFilter, []string{"0x1DB110DE"}) || !e.AllDevices || e.VGPUDevices[0].Type.Name != "V100X-8Q" {
		t.Errorf("default's first entry: %+v", e)
	}

	t4 := decodeFile(t, "config-t4.yaml")
	small, err := t4.Select("T4-small")
	if err != nil || len(small.Entries) != 2 {
		t.Fatalf("T4-small: %+v, %v", small, err)
	}
	if e := small.Entries[1]; e.AllDevices || !reflect.DeepEqual(e.Devices, []int{1}) || e.VGPUDevices[0].Type.Name != "T4-2Q" || e.VGPUDevices[0].Count != 8 {
		t.Errorf("T4-small's second entry: %+v", e)
	}
	if _, err := t4.Select(""); err == nil || !strings.Contains(err.Error(), "has 8 vgpu-configs; name one (--config NAME): T4-1Q, T4-2Q") {
		t.Errorf("select without a name: %v", err)
	}
	if _, err := t4.Select("T4-huge"); err == nil || !strings.Contains(err.Error(), "no vgpu-config T4-huge") {
		t.Errorf("select an unknown name: %v", err)
	}
}

// TestDecodeAsTheTool: the cases of the tool's own api/spec/v1 tests
// (spec_test.go TestSpec, at acb72704) and of its type parser, plus what
// its JSON decoding implies, each accepted or refused as the tool does.
func TestDecodeAsTheTool(t *testing.T) {
	entry := "vgpu-configs:\n  c:\n    - devices: all\n      vgpu-devices:\n        A100-4C: 10\n"
	for _, c := range []struct {
		name, yaml string
		problem    string // "" accepted
	}{
		{"only version", "version: v1\n", ""},
		{"well formed", "version: v1\n" + entry, ""},
		{"two configs", "version: v1\n" + entry + "  d:\n    - devices: [0, 1]\n      device-filter: [\"0x20B010DE\"]\n      vgpu-devices: {A100-5C: 8}\n", ""},
		{"wrong version", "version: v2\n" + entry, "version: unknown version v2"},
		{"version a number", "version: 1\n" + entry, "version: unknown version 1"},
		{"missing version", entry, "version: missing"},
		{"erroneous field", "bogus: field\nversion: v1\n" + entry, "bogus: unexpected field"},
		{"empty vgpu-configs", "version: v1\nvgpu-configs: {}\n", "vgpu-configs: at least one entry is required"},
		{"empty config", "version: v1\nvgpu-configs:\n  c: []\n", "vgpu-configs.c: at least one entry is required"},
		{"no devices", "version: v1\nvgpu-configs:\n  c:\n    - vgpu-devices: {T4-4Q: 4}\n", "vgpu-configs.c[0].devices: missing required field"},
		{"no vgpu-devices", "version: v1\nvgpu-configs:\n  c:\n    - devices: all\n", "vgpu-configs.c[0].vgpu-devices: missing required field"},
		{"empty vgpu-devices", "version: v1\nvgpu-configs:\n  c:\n    - devices: all\n      vgpu-devices: {}\n", ""},
		{"devices some string", "version: v1\nvgpu-configs:\n  c:\n    - devices: some\n      vgpu-devices: {T4-4Q: 4}\n", `invalid string input some`},
		{"devices a number", "version: v1\nvgpu-configs:\n  c:\n    - devices: 0\n      vgpu-devices: {T4-4Q: 4}\n", `neither "all" nor a list`},
		{"devices strings", "version: v1\nvgpu-configs:\n  c:\n    - devices: [\"0\"]\n      vgpu-devices: {T4-4Q: 4}\n", `devices[0]: the string "0" is not a whole number`},
		{"filter unquoted", "version: v1\nvgpu-configs:\n  c:\n    - devices: all\n      device-filter: 0x1EB810DE\n      vgpu-devices: {T4-4Q: 4}\n", "is neither a string nor a list of strings"},
		{"unknown entry field", "version: v1\nvgpu-configs:\n  c:\n    - devices: all\n      mig-devices: {}\n      vgpu-devices: {T4-4Q: 4}\n", "vgpu-configs.c[0].mig-devices: unexpected field"},
		{"count zero", "version: v1\nvgpu-configs:\n  c:\n    - devices: all\n      vgpu-devices: {T4-4Q: 0}\n", "invalid count 0"},
		{"count quoted", "version: v1\nvgpu-configs:\n  c:\n    - devices: all\n      vgpu-devices: {T4-4Q: \"4\"}\n", `the string "4" is not a whole number`},
		{"malformed type", "version: v1\nvgpu-configs:\n  c:\n    - devices: all\n      vgpu-devices: {GRID T4-4Q: 4}\n", `malformed vGPU type string "GRID T4-4Q"`},
		{"lower-case type", "version: v1\nvgpu-configs:\n  c:\n    - devices: all\n      vgpu-devices: {t4-4q: 4}\n", "malformed vGPU type string t4-4q"},
		{"mixed MIG and time-sliced", "version: v1\nvgpu-configs:\n  c:\n    - devices: all\n      vgpu-devices: {A100-4C: 5, A100-1-5C: 2}\n", "cannot mix time-sliced and MIG-backed"},
		{"two time-sliced types", "version: v1\nvgpu-configs:\n  c:\n    - devices: all\n      vgpu-devices: {A100-4C: 5, A100-5C: 4}\n", ""},
		{"duplicate config", "version: v1\nvgpu-configs:\n  c:\n    - devices: all\n      vgpu-devices: {T4-4Q: 4}\n  c:\n    - devices: all\n      vgpu-devices: {T4-2Q: 8}\n", "vgpu-configs.c: is given twice (first on line 3)"},
		{"anchors and merge keys", "version: v1\nvgpu-configs:\n  c:\n    - &e\n      devices: all\n      vgpu-devices: {T4-4Q: 4}\n  d:\n    - <<: *e\n      devices: [0]\n", ""},
		{"a second document", "version: v1\n" + entry + "---\nversion: v1\n", "a second YAML document"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := vgpudm.Decode("f.yaml", []byte(c.yaml))
			switch {
			case c.problem == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.problem != "" && (err == nil || !strings.Contains(err.Error(), c.problem) || !errors.Is(err, vgpudm.ErrInvalid)):
				t.Fatalf("err = %v; want ErrInvalid saying %q", err, c.problem)
			}
		})
	}
}

func TestDecodeLinesAndMerges(t *testing.T) {
	s, err := vgpudm.Decode("f.yaml", []byte("version: v1\nvgpu-configs:\n  c:\n    - &e\n      devices: all\n      vgpu-devices: {T4-4Q: 4}\n  d:\n    - <<: *e\n      devices: [0]\n"))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := s.Select("d")
	if e := d.Entries[0]; e.AllDevices || !reflect.DeepEqual(e.Devices, []int{0}) || len(e.VGPUDevices) != 1 || e.VGPUDevices[0].Count != 4 {
		t.Errorf("merged entry: %+v; want devices [0] written over the anchor's all, its vgpu-devices kept", e)
	}
	_, err = vgpudm.Decode("f.yaml", []byte("version: v1\nvgpu-configs:\n  c:\n    - devices: all\n      vgpu-devices: {T4-4Q: 0}\n  d:\n    - devices: all\n"))
	if err == nil || !strings.Contains(err.Error(), "f.yaml:5: vgpu-configs.c[0].vgpu-devices.T4-4Q: invalid count 0") ||
		!strings.Contains(err.Error(), "f.yaml:7: vgpu-configs.d[0].vgpu-devices: missing required field") {
		t.Errorf("every problem with its line: %v", err)
	}
}

func TestParseVGPUType(t *testing.T) {
	for s, want := range map[string]vgpudm.VGPUType{
		"T4-4Q":          {Name: "T4-4Q", GPU: "T4", GB: 4, Series: 'Q'},
		"M60-0Q":         {Name: "M60-0Q", GPU: "M60", GB: 0, Series: 'Q'},
		"RTX6000-Ada-8Q": {Name: "RTX6000-Ada-8Q", GPU: "RTX6000-Ada", GB: 8, Series: 'Q'},
		"A100-2-10C":     {Name: "A100-2-10C", GPU: "A100", G: 2, GB: 10, Series: 'C'},
		"DC-1-24CGFX":    {Name: "DC-1-24CGFX", GPU: "DC", G: 1, GB: 24, Series: 'C', Attr: "GFX"},
		"A100-1-5CME":    {Name: "A100-1-5CME", GPU: "A100", G: 1, GB: 5, Series: 'C', Attr: "ME"},
	} {
		got, err := vgpudm.ParseVGPUType(s)
		if err != nil || got != want {
			t.Errorf("ParseVGPUType(%s) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	for _, bad := range []string{"", "T4-4", "T4-4X", "T4-04Q", "A100-0-5C", "GRID T4-4Q"} {
		if _, err := vgpudm.ParseVGPUType(bad); err == nil {
			t.Errorf("ParseVGPUType(%q) accepted", bad)
		}
	}
}

func TestParseDeviceID(t *testing.T) {
	id, err := vgpudm.ParseDeviceID("0x1EB810DE")
	if err != nil || id.Device != 0x1eb8 || id.Vendor != 0x10de || id.HasSubsystem || id.PCIID() != "10de:1eb8" {
		t.Errorf("0x1EB810DE: %+v, %v", id, err)
	}
	id, err = vgpudm.ParseDeviceID("0x1EB810DE:0x12A210DE")
	if err != nil || !id.HasSubsystem || id.SubsystemDevice != 0x12a2 || id.SubsystemVendor != 0x10de {
		t.Errorf("with a subsystem: %+v, %v", id, err)
	}
	for _, bad := range []string{"10de:1eb8", "0x1EB810DE:x", "a:b:c", "0x1EB810DE10"} {
		if _, err := vgpudm.ParseDeviceID(bad); err == nil {
			t.Errorf("ParseDeviceID(%q) accepted", bad)
		}
	}
}
