package profile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/profiles"
)

func TestLoadBuiltIn(t *testing.T) {
	c := loadBuiltIn(t)
	var got []string
	for _, p := range c.Profiles() {
		got = append(got, p.Name)
	}
	// Sorted by model name, then split.
	want := []string{
		"s7150-8g", "s7150-4g", "s7150-2g", "s7150-2g-liquid", "s7150-1g", "s7150-512m",
		"mi300x-192g", "mi300x-24g",
		"mi350x-288g", "mi350x-144g", "mi350x-36g",
		"mi25-16g", "mi25-8g", "mi25-4g", "mi25-2g", "mi25-1g",
		"v710-28g", "v710-14g", "v710-9557m", "v710-7g", "v710-4778m", "v710-3584m", "v710-2389m",
		"b50-16g", "b50-8g", "b50-4g", "b50-4g-pinned", "b50-4g-sliced", "b50-2g",
		"b60-24g", "b60-12g", "b60-6g", "b60-6g-pinned", "b60-6g-sliced", "b60-3g",
		"gvtg-1", "gvtg-2", "gvtg-4", "gvtg-7",
		"a10-24q", "a10-12q", "a10-6q", "a10-3q",
		"a100-40c", "a100-20c", "a100-10c", "a100-5c",
		"a100-7-40c", "a100-3-20c", "a100-2-10c", "a100-1-5c",
		"a100-vf-40c", "a100-vf-20c", "a100-vf-10c", "a100-vf-5c",
		"a16-16q", "a16-8q", "a16-4q", "a16-2q", "a16-1q",
		"a2-16q", "a2-8q", "a2-4q", "a2-2q", "a2-1q",
		"a30-4-24c", "a30-2-12c", "a30-1-6c",
		"a40-48q", "a40-24q", "a40-12q", "a40-6q", "a40-3q",
		"b200x-180c",
		"b200x-7-180c", "b200x-3-90c", "b200x-2-45c", "b200x-1-45c", "b200x-1-23c",
		"rtx3090-full",
		"h100-80c", "h100-40c", "h100-20c", "h100-10c", "h100-5c",
		"h100-7-80c", "h100-3-40c", "h100-2-20c", "h100-1-20c", "h100-1-10c",
		"h100xm-7-80c", "h100xm-3-40c", "h100xm-2-20c", "h100xm-1-20c", "h100xm-1-10c",
		"h200-141c", "h200-70c", "h200-35c", "h200-17c", "h200-8c",
		"h200-7-141c", "h200-3-71c", "h200-2-35c", "h200-1-35c", "h200-1-18c",
		"h200x-141c", "h200x-70c", "h200x-35c", "h200x-17c", "h200x-8c",
		"h200x-7-141c", "h200x-3-71c", "h200x-2-35c", "h200x-1-35c", "h200x-1-18c",
		"l4-24q", "l4-12q", "l4-6q", "l4-3q",
		"l40-48q", "l40-24q", "l40-12q", "l40-6q", "l40-3q",
		"l40s-48q", "l40s-24q", "l40s-12q", "l40s-12q-fixed", "l40s-12q-mixed", "l40s-6q", "l40s-3q",
		"rtx6000ada-48q", "rtx6000ada-24q", "rtx6000ada-12q", "rtx6000ada-6q", "rtx6000ada-3q",
		"rtxpro6000-96q", "rtxpro6000-48q", "rtxpro6000-24q", "rtxpro6000-12q", "rtxpro6000-6q",
		"t4-16q", "t4-8q", "t4-4q", "t4-4q-equal", "t4-2q", "t4-1q",
		"passthrough", // built in, last
	}
	if !slices.Equal(got, want) {
		t.Errorf("Profiles() =\n%v\nwant\n%v", got, want)
	}
	p, ok := c.Get("t4-4q")
	if !ok || p.File != "profiles/nvidia-t4.yaml" || p.Model.Name != "NVIDIA Tesla T4" || p.FramebufferMB() != 4096 {
		t.Errorf("Get(t4-4q) = %+v, %v", p, ok)
	}
	if _, ok := c.Get("t4-3q"); ok {
		t.Error("Get(t4-3q) found something")
	}
}

// Each file's splits are the ones the hardware offers equally, and every
// file is one the embed and the Makefile's install both pick up.
func TestBuiltInSplits(t *testing.T) {
	c := loadBuiltIn(t)
	want := map[string][]int{
		"AMD FirePro S7150":                  {1, 2, 4, 8, 16},
		"AMD Radeon Instinct MI25":           {1, 2, 4, 8, 16},
		"AMD Instinct MI300X":                {1, 8},
		"AMD Instinct MI350X":                {1, 2, 8},
		"AMD Radeon PRO V710":                {1, 2, 3, 4, 6, 8, 12},
		"NVIDIA Tesla T4":                    {1, 2, 4, 8, 16},
		"NVIDIA A100 PCIe 40GB":              {1, 2, 4, 8},
		"NVIDIA L40S":                        {1, 2, 4, 8, 16},
		"NVIDIA A100 PCIe 40GB (MIG-backed)": {1, 2, 3, 7},
		"NVIDIA A100 PCIe 40GB (vGPU 17+)":   {1, 2, 4, 8},
		"NVIDIA RTX 6000 Ada Generation":     {1, 2, 4, 8, 16},
		"Intel Gen9 graphics (GVT-g)":        {1, 2, 4, 7},
		"NVIDIA GeForce RTX 3090":            {1},
		"Intel Arc Pro B50":                  {1, 2, 4, 8},
		"Intel Arc Pro B60":                  {1, 2, 4, 8},
		// 24 GB boards: their 1Q and 2Q make 24 and 12, 8Q and 4Q 3 and 6.
		"NVIDIA A10": {1, 2, 4, 8},
		"NVIDIA L4":  {1, 2, 4, 8},
		"NVIDIA A2":  {1, 2, 4, 8, 16},
		"NVIDIA A16": {1, 2, 4, 8, 16},
		"NVIDIA A40": {1, 2, 4, 8, 16},
		"NVIDIA L40": {1, 2, 4, 8, 16},
		// Time-sliced C types; the B200 has one, the whole GPU.
		"NVIDIA H100 PCIe 80GB":         {1, 2, 4, 8, 16},
		"NVIDIA H200 NVL":               {1, 2, 4, 8, 16},
		"NVIDIA H200 SXM 141GB":         {1, 2, 4, 8, 16},
		"NVIDIA B200":                   {1},
		"NVIDIA RTX PRO 6000 Blackwell": {1, 2, 4, 8, 16},
		// MIG-backed: GPU instances of one profile filling the memory.
		"NVIDIA A30 24GB (MIG-backed)":       {1, 2, 4},
		"NVIDIA H100 PCIe 80GB (MIG-backed)": {1, 2, 3, 4, 7},
		"NVIDIA H100 SXM5 80GB (MIG-backed)": {1, 2, 3, 4, 7},
		"NVIDIA H200 NVL (MIG-backed)":       {1, 2, 3, 4, 7},
		"NVIDIA H200 SXM 141GB (MIG-backed)": {1, 2, 3, 4, 7},
		"NVIDIA B200 (MIG-backed)":           {1, 2, 3, 4, 7},
		// Built in: every GPU passed through whole.
		"any GPU": {1},
	}
	got := map[string][]int{}
	for _, p := range c.Profiles() {
		if p.GIM == nil && p.Xe == nil && p.Scheduler == nil && !p.MixedSize { // a scheduler or mixed-size variant is no split of its own
			got[p.Model.Name] = append(got[p.Model.Name], p.Split)
		}
	}
	for model, splits := range want {
		if !slices.Equal(got[model], splits) {
			t.Errorf("%s splits = %v, want %v", model, got[model], splits)
		}
	}
	if len(got) != len(want) {
		t.Errorf("models = %v", got)
	}
}

func TestForGPU(t *testing.T) {
	c := loadBuiltIn(t)
	for _, dev := range []uint16{0x3e92, 0x5912, 0x3e9b, 0x9bc5} {
		g := gvtgGPU()
		g.DeviceID = dev
		if ps := c.ForGPU(g); len(ps) != 5 || !ps[4].Builtin() {
			t.Errorf("ForGPU(8086:%04x) = %d profiles, want 4 and the built-in passthrough", dev, len(ps))
		}
	}
	if ps := c.ForGPU(inventory.GPU{VendorID: 0x10de, DeviceID: 0x6860}); len(ps) != 1 || ps[0].Name != Passthrough {
		t.Errorf("vendor must match too: %v", ps)
	}
}

// Profiles handed out are copies: a caller cannot change the catalog.
func TestProfilesAreCopies(t *testing.T) {
	c := loadBuiltIn(t)
	p, _ := c.Get("gvtg-4")
	p.Model.DeviceIDs[0] = 0xdead
	c.Profiles()[0].Model.DeviceIDs[0] = 0xdead
	c.ForGPU(mi25GPU())[0].Model.DeviceIDs[0] = 0xdead
	for _, p := range c.Profiles() {
		if slices.Contains(p.Model.DeviceIDs, 0xdead) {
			t.Fatalf("catalog changed through a returned profile: %s", p.Name)
		}
	}
}

const extraT4 = `version: v1
model: NVIDIA Tesla T4
match: {vendor: 10de, devices: [1eb8]}
dialect: mdev
framebuffer-mb: 16384
profiles:
  - name: t4-4c
    split: 4
    mdev-type: {id: nvidia-319, name: GRID T4-4C}
`

func TestLoadCatalogAcrossFiles(t *testing.T) {
	base := fstest.MapFS{
		"cat/mi25.yaml":      {Data: []byte(sriovDoc)},
		"cat/t4.yaml":        {Data: []byte(mdevDoc)},
		"cat/t4-c.yaml":      {Data: []byte(extraT4)},
		"cat/README.md":      {Data: []byte("not a catalog file")},
		"cat/sub/x.yaml":     {Data: []byte("ignored: subdirectories are not read")},
		"cat/old.yaml.orig":  {Data: []byte("not *.yaml")},
		"elsewhere/zz.yaml":  {Data: []byte("not in dir")},
		"cat/l40s.yaml":      {Data: []byte(nvidiaDoc)},
		"cat/mi25-copy.yaml": {Data: []byte(strings.ReplaceAll(sriovDoc, "name: mi25-", "name: copy-"))},
	}
	c, err := LoadCatalog(base, "cat")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.Profiles()); n != 3+2+1+1+3+1 { // and the built-in passthrough
		t.Errorf("%d profiles", n)
	}
	// Two files may add profiles to one model.
	if ps := c.ForGPU(t4GPU()); len(ps) != 3+1 {
		t.Errorf("T4 profiles = %d, want 3 and passthrough", len(ps))
	}
	if pl, err := c.Resolve("t4-4c", t4GPU()); err != nil || pl.MdevType != "nvidia-319" {
		t.Errorf("Resolve(t4-4c) = %+v, %v", pl, err)
	}

	cases := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"duplicate name", map[string]string{
			"a.yaml": sriovDoc,
			"b.yaml": strings.Replace(extraT4, "t4-4c", "mi25-8g", 1),
		}, []string{"cat/b.yaml:7: profiles[0].name: mi25-8g is already defined in cat/a.yaml:11", "allowed: a name unique across the catalog"}},
		{"dialect conflict", map[string]string{
			"a.yaml": mdevDoc,
			"b.yaml": strings.NewReplacer("dialect: mdev", "dialect: passthrough", "t4-4c", "t4-full", "split: 4", "split: 1", "    mdev-type: {id: nvidia-319, name: GRID T4-4C}\n", "").Replace(extraT4),
		}, []string{"cat/b.yaml:3: match.devices[0]: 10de:1eb8 is already NVIDIA Tesla T4 in cat/a.yaml (dialect mdev, framebuffer-mb 16384)", "allowed: one dialect and framebuffer-mb per GPU"}},
		{"bad file", map[string]string{
			"a.yaml": sriovDoc,
			"b.yaml": strings.Replace(mdevDoc, "split: 4", "split: 0", 1),
		}, []string{"cat/b.yaml:13: profiles[1].split: 0 is not allowed; allowed: 1 to 16"}},
		{"every bad file reported", map[string]string{
			"a.yaml": "version: v2\n",
			"b.yaml": "",
		}, []string{"cat/a.yaml:1: version: v2 is not supported", "cat/b.yaml: the file is empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for name, data := range tc.files {
				fsys["cat/"+name] = &fstest.MapFile{Data: []byte(data)}
			}
			_, err := LoadCatalog(fsys, "cat")
			if err == nil {
				t.Fatal("LoadCatalog succeeded")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("not ErrInvalid: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%s", w, err)
				}
			}
		})
	}

	if _, err := LoadCatalog(base, "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing dir: %v", err)
	}
}

func TestLoadExtraDirs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("t4-c.yaml", extraT4)
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := c.Get("t4-4c")
	if !ok || p.File != filepath.Join(dir, "t4-c.yaml") {
		t.Fatalf("Get(t4-4c) = %+v, %v", p, ok)
	}
	if !ok || len(c.ForGPU(t4GPU())) != 7+1 {
		t.Errorf("T4 profiles = %d, want 7 and passthrough", len(c.ForGPU(t4GPU())))
	}

	// An installed copy of a built-in file is the same definition: fine.
	data, err := fs.ReadFile(profiles.FS, "amd-mi25.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write("amd-mi25.yaml", string(data))
	if _, err := Load(dir); err != nil {
		t.Errorf("identical copy refused: %v", err)
	}

	// A different definition under a built-in name is not.
	write("amd-mi25.yaml", strings.Replace(string(data), "description: a quarter of an MI25, 4 GB", "description: changed", 1))
	_, err = Load(dir)
	if err == nil || !strings.Contains(err.Error(), "profiles[2].name: mi25-4g is already defined in profiles/amd-mi25.yaml:") {
		t.Errorf("redefinition: %v", err)
	}

	if _, err := Load(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing dir: %v", err)
	}
}

// A file of MIG-backed profiles only may give a GPU another dialect than
// its time-sliced file (vGPU 17+ per-VF types beside pre-17 mdevs); a file
// with any time-sliced profile may not.
func TestMIGFileBesideTimeSliced(t *testing.T) {
	const sliced = `version: v1
model: NVIDIA A100 PCIe 40GB
match: {vendor: 10de, devices: [20f1]}
dialect: sriov-mdev
framebuffer-mb: 40960
profiles:
  - name: a100-10c
    split: 4
    mdev-type: {id: nvidia-471, name: NVIDIA A100-10C}
`
	const migDoc = `version: v1
model: NVIDIA A100 PCIe 40GB (MIG-backed)
match: {vendor: 10de, devices: [20f1]}
dialect: nvidia-vf
framebuffer-mb: 40960
profiles:
  - name: a100-1-5c
    split: 7
    nvidia-type: {id: 474, name: NVIDIA A100-1-5C}
    gpu-instance: {profile: 1g.5gb, id: 19}
`
	load := func(mig string) error {
		_, err := LoadCatalog(fstest.MapFS{"cat/a.yaml": {Data: []byte(sliced)}, "cat/b.yaml": {Data: []byte(mig)}}, "cat")
		return err
	}
	if err := load(migDoc); err != nil {
		t.Fatalf("MIG-only file beside a time-sliced one: %v", err)
	}
	// vGPU 17+'s MIG-backed and time-sliced types in one file beside the
	// pre-17 one: the board's two host-driver generations.
	mixed := migDoc + "  - name: a100-10c-vf\n    split: 4\n    nvidia-type: {id: 471, name: NVIDIA A100-10C}\n"
	if err := load(mixed); err != nil {
		t.Fatalf("a vGPU 17+ file beside the pre-17 one: %v", err)
	}
	// Any other second dialect for the board is ambiguous.
	other := "version: v1\nmodel: X\nmatch: {vendor: 10de, devices: [20f1]}\ndialect: sriov\nframebuffer-mb: 40960\nprofiles:\n  - name: x-2\n    split: 2\n"
	if err := load(other); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "one dialect and framebuffer-mb per GPU") {
		t.Fatalf("an sriov file beside the sriov-mdev one: %v", err)
	}
	if err := load(strings.Replace(migDoc, "framebuffer-mb: 40960", "framebuffer-mb: 81920", 1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("MIG file with another framebuffer: %v", err)
	}
}
