package importer_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/importer"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpudm"
)

// The tool's examples (pkg/vgpudm/testdata/README.md).
func example(t *testing.T, name string) *vgpudm.Spec {
	t.Helper()
	p := filepath.Join("..", "vgpudm", "testdata", name)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s, err := vgpudm.Decode(p, data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func builtin(t *testing.T) *profile.Catalog {
	t.Helper()
	c, err := profile.Load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// noGPUs is a host without GPUs: an import for a fleet.
func noGPUs(t *testing.T) *simkernel.Kernel {
	t.Helper()
	k, err := simkernel.New(simkernel.Host{Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func importVGPUDM(t *testing.T, s *vgpudm.Spec, name string, k *simkernel.Kernel) importer.Result {
	t.Helper()
	r, err := importer.VGPUDM(importer.VGPUDMInput{Spec: s, Config: name, FS: k, Catalog: builtin(t)})
	if err != nil {
		t.Fatalf("import %s: %v", name, err)
	}
	if _, err := r.YAML(); err != nil {
		t.Fatalf("import %s: %v", name, err)
	}
	return r
}

func entries(r importer.Result) []config.Entry {
	var out []config.Entry
	for _, e := range r.Entries {
		out = append(out, e.Entry)
	}
	return out
}

// TestVGPUDMExample: configs of the tool's full example, for a fleet (no
// GPU here): each maps to the profile of its type and count, or is named.
func TestVGPUDMExample(t *testing.T) {
	s := example(t, "config-example.yaml")
	k := noGPUs(t)
	for name, want := range map[string]string{
		"T4-4Q":     "all t4-4q",
		"L40S-12Q":  "all l40s-12q",
		"A10-6Q":    "all a10-6q",
		"A100-1-5C": "all a100-1-5c",
		"A100-20C":  "skip: the type is a100-20c (sriov-mdev) or a100-vf-20c (nvidia-vf), by the host's NVIDIA driver, and no GPU here shows which",
		"A10-4Q":    "skip: no catalog profile has vGPU type A10-4Q",
		"V100-8Q":   "skip: no catalog profile has vGPU type V100-8Q",
	} {
		r := importVGPUDM(t, s, name, k)
		got := ""
		switch {
		case len(r.Entries) == 1 && len(r.Skipped) == 0 && r.Entries[0].All:
			got = "all " + r.Entries[0].Profile
		case len(r.Entries) == 0 && len(r.Skipped) == 1:
			got = "skip: " + r.Skipped[0]
		}
		if !strings.HasPrefix(strings.Replace(got, "vgpu-configs."+name+"[0] (line ", "", 1), "") || !strings.Contains(got, strings.TrimPrefix(want, "skip: ")) || strings.HasPrefix(want, "skip") != strings.HasPrefix(got, "skip") {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}

	// Every config of the file either maps whole or is named: the import
	// never fails and never guesses.
	mapped := 0
	for _, c := range s.Configs {
		r := importVGPUDM(t, s, c.Name, k)
		if len(r.Skipped) == 0 {
			mapped++
		}
		if len(r.Entries) == 0 && len(r.Skipped) == 0 {
			t.Errorf("%s: neither imported nor named", c.Name)
		}
	}
	t.Logf("%d of %d configs of config-example.yaml map to built-in profiles", mapped, len(s.Configs))
	if mapped == 0 {
		t.Error("no config of the example maps")
	}
}

// TestVGPUDMOnThisHost: the example's default config on a host with a T4
// and an A100 under vGPU 16, golden: the device-filter entries of models
// the catalog has become id entries, the A100's profile chosen by its
// driver; the others are named, one line each.
func TestVGPUDMOnThisHost(t *testing.T) {
	k := newHost(t)
	r := importVGPUDM(t, example(t, "config-example.yaml"), "default", k)
	y, err := r.YAML()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "vgpudm-default", y)
	want := map[string]string{"10de:1eb8": "t4-8q", "10de:20f1": "a100-20c", "10de:2236": "a10-12q", "10de:26b9": "l40s-24q"}
	for _, e := range r.Entries {
		if p, ok := want[e.ID.String()]; ok && p == e.Profile {
			delete(want, e.ID.String())
		}
		if e.ID.IsZero() {
			t.Errorf("entry %+v: want an id entry for each device-filter", e.Entry)
		}
	}
	if len(want) != 0 {
		t.Errorf("missing entries: %v", want)
	}
	t.Logf("default: %d entries, %d named", len(r.Entries), len(r.Skipped))
}

// TestVGPUDMIndexes: the README's T4 configs on a host with two T4s: GPU
// indexes become the addresses this host numbers so.
func TestVGPUDMIndexes(t *testing.T) {
	second := pci.MustParseAddress("0000:5e:00.0")
	k := newHost(t, simkernel.HostGPU{Model: "t4", Address: second})
	s := example(t, "config-t4.yaml")
	r := importVGPUDM(t, s, "T4-small", k)
	got := entries(r)
	if len(got) != 2 || !reflect.DeepEqual(got[0], config.Entry{Address: t4, Profile: "t4-1q"}) || !reflect.DeepEqual(got[1], config.Entry{Address: second, Profile: "t4-2q"}) || len(r.Skipped) != 0 {
		t.Errorf("T4-small: %+v, skipped %v", got, r.Skipped)
	}
	if !strings.Contains(strings.Join(r.Header, "\n"), "GPU indexes here: 0 0000:3b:00.0 (NVIDIA Tesla T4), 1 0000:5e:00.0 (NVIDIA Tesla T4), 2 0000:65:00.0") {
		t.Errorf("header:\n%s", strings.Join(r.Header, "\n"))
	}
	// On a host with one T4, index 1 is another host's GPU.
	r = importVGPUDM(t, s, "T4-large", newHost(t))
	if got := entries(r); len(got) != 1 || !reflect.DeepEqual(got[0], config.Entry{Address: t4, Profile: "t4-8q"}) ||
		len(r.Skipped) != 1 || !strings.Contains(r.Skipped[0], "GPU index 1 is 0000:65:00.0 (NVIDIA A100 PCIe 40GB), and 1 x T4-16Q is a profile of NVIDIA Tesla T4") {
		t.Errorf("T4-large on one T4: %+v, skipped %v", got, r.Skipped)
	}
}

// TestVGPUDMNotMapped: what has no vgpud profile is named, never guessed.
func TestVGPUDMNotMapped(t *testing.T) {
	k := newHost(t)
	for _, c := range []struct{ name, entries, want string }{
		{"not the type's count", "- devices: all\n  vgpu-devices: {T4-4Q: 2}\n", "2 x T4-4Q is not an equal split vgpud makes: t4-4q splits NVIDIA Tesla T4 4:1"},
		{"mixed types", "- devices: all\n  vgpu-devices: {T4-4Q: 2, T4-8Q: 1}\n", "mixed types on one GPU (T4-4Q: 2, T4-8Q: 1)"},
		{"no types", "- devices: all\n  vgpu-devices: {}\n", "no vGPU types: the tool deletes every vGPU"},
		{"a subsystem filter", "- devices: all\n  device-filter: \"0x1EB810DE:0x12A210DE\"\n  vgpu-devices: {T4-4Q: 4}\n", "selects by subsystem too (10de:12a2)"},
		{"a filter that is no id", "- devices: all\n  device-filter: \"T4\"\n  vgpu-devices: {T4-4Q: 4}\n", `invalid device id T4`},
		{"a filter of another model", "- devices: all\n  device-filter: \"0x20F110DE\"\n  vgpu-devices: {T4-4Q: 4}\n", "no catalog profile has vGPU type T4-4Q for device-filter 0x20F110DE"},
		{"an index this host lacks", "- devices: [5]\n  vgpu-devices: {T4-4Q: 4}\n", "GPU index 5: this host has 2 NVIDIA GPUs (0 0000:3b:00.0, 1 0000:65:00.0)"},
		{"no index", "- devices: []\n  vgpu-devices: {T4-4Q: 4}\n", "devices [] selects no GPU"},
		{"an index the filter skips", "- devices: [1]\n  device-filter: \"0x1EB810DE\"\n  vgpu-devices: {T4-4Q: 4}\n", "GPU index 1 is 0000:65:00.0 (10de:20f1), which its device-filter does not match"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := vgpudm.Decode("f.yaml", []byte("version: v1\nvgpu-configs:\n  c:\n"+indent(c.entries)))
			if err != nil {
				t.Fatal(err)
			}
			r := importVGPUDM(t, s, "", k)
			if len(r.Entries) != 0 || len(r.Skipped) != 1 || !strings.HasPrefix(r.Skipped[0], "vgpu-configs.c[0] (line 4): ") || !strings.Contains(r.Skipped[0], c.want) {
				t.Fatalf("entries %+v, skipped:\n%s\nwant one line with %q", entries(r), strings.Join(r.Skipped, "\n"), c.want)
			}
		})
	}

	// Two entries selecting one GPU: the tool applies the later there; both
	// are named, neither guessed to win.
	s, err := vgpudm.Decode("f.yaml", []byte("version: v1\nvgpu-configs:\n  c:\n"+indent("- devices: all\n  vgpu-devices: {T4-4Q: 4}\n- devices: [0]\n  vgpu-devices: {T4-16Q: 1}\n- devices: all\n  device-filter: \"0x20F110DE\"\n  vgpu-devices: {A100-20C: 2}\n")))
	if err != nil {
		t.Fatal(err)
	}
	r := importVGPUDM(t, s, "c", k)
	if got := entries(r); len(got) != 1 || !reflect.DeepEqual(got[0], config.Entry{ID: config.PCIID{Vendor: 0x10de, Device: 0x20f1}, Profile: "a100-20c"}) || len(r.Skipped) != 2 ||
		!strings.Contains(r.Skipped[0], "vgpu-configs.c[0] (line 4): selects GPUs that vgpu-configs.c[1] (line 6) selects too") {
		t.Errorf("overlap: %+v, skipped:\n%s", got, strings.Join(r.Skipped, "\n"))
	}
}

func indent(s string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "    " + l
		}
	}
	return strings.Join(lines, "")
}
