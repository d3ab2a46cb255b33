package profile

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/vgpu-project/vgpu/pkg/inventory"
)

// A type the catalog gives by name only takes its id from an idle VF's
// list; where no list shows it, the resolver refuses and says why rather
// than plan id 0 (which current_vgpu_type reads as "destroy").
func TestResolveNameOnlyNVIDIAType(t *testing.T) {
	c := loadBuiltIn(t)
	a16 := vfBoards()["a16"]
	if p, _ := c.Get("a16-4q"); p.NVIDIA.ID != 0 {
		t.Fatalf("a16-4q has id %d: the test needs a type given by name only", p.NVIDIA.ID)
	}

	pl, err := c.Resolve("a16-4q", a16.gpu())
	if err != nil {
		t.Fatal(err)
	}
	if pl.NVIDIATypeID != 9202 || pl.NVIDIATypeName != "NVIDIA A16-4Q" || pl.NumVFs != 4 {
		t.Errorf("plan = %+v, want the VFs' id 9202 for NVIDIA A16-4Q", pl)
	}

	// A VF freed on a busy GPU lists the type again (vgpud re-sets a
	// VF's type before its VM starts): the id comes from it.
	busy := a16.gpu()
	for i := range busy.SRIOV.VFs {
		vf := busy.SRIOV.VFs[i].NVIDIA
		vf.Creatable = nil
		if i < 3 {
			vf.CurrentType = 9202
		}
	}
	busy.SRIOV.VFs[3].NVIDIA.Creatable = []inventory.VGPUType{{ID: 9202, Name: "NVIDIA A16-4Q"}}
	if pl, err := c.Resolve("a16-4q", busy); err != nil || pl.NVIDIATypeID != 9202 {
		t.Errorf("Resolve on a busy A16 with one free VF = %+v, %v", pl, err)
	}

	refusals := []struct {
		name string
		gpu  func() inventory.GPU
		want []string
	}{
		{"VFs not enabled", func() inventory.GPU {
			g := a16.gpu()
			g.SRIOV.NumVFs, g.SRIOV.VFs = 0, nil
			return g
		}, []string{`NVIDIA A16 cannot be split 4:1 on 0000:18:00.0: the catalog gives "NVIDIA A16-4Q" (vGPU type) by name only`,
			"the VFs that list it in creatable_vgpu_types are not enabled", "sriov-manage -e 0000:18:00.0", "profile file of your own"}},
		{"full GPU", func() inventory.GPU {
			g := a16.gpu()
			for i := range g.SRIOV.VFs {
				g.SRIOV.VFs[i].NVIDIA.Creatable = nil
				if i < 4 {
					g.SRIOV.VFs[i].NVIDIA.CurrentType = 9202
				}
			}
			return g
		}, []string{`"NVIDIA A16-4Q" (vGPU type) by name only`, "no VF lists it in creatable_vgpu_types now", "free a VF"}},
		{"VFs without per-VF types", func() inventory.GPU {
			g := a16.gpu()
			for i := range g.SRIOV.VFs {
				g.SRIOV.VFs[i].NVIDIA = nil
			}
			return g
		}, []string{`"NVIDIA A16-4Q" (vGPU type) by name only`, "no VF shows creatable_vgpu_types", "host driver"}},
		{"idle VFs without the type", func() inventory.GPU {
			g := a16.gpu()
			for i := range g.SRIOV.VFs {
				g.SRIOV.VFs[i].NVIDIA.Creatable = fixtureTypes(9200, "NVIDIA A16-1Q")
			}
			return g
		}, []string{`its VFs do not offer vGPU type "NVIDIA A16-4Q"; they offer 9200 (NVIDIA A16-1Q)`}},
		// The A2 shares the A16's device id: its types are not the A16's.
		{"A2 profile on an A16", a16.gpu, []string{`its VFs do not offer vGPU type "NVIDIA A2-4Q"`}},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			name := "a16-4q"
			if strings.HasPrefix(tc.name, "A2") {
				name = "a2-4q"
			}
			pl, err := c.Resolve(name, tc.gpu())
			if err == nil {
				t.Fatalf("Resolve succeeded: %+v", pl)
			}
			if !errors.Is(err, ErrCannotSplit) {
				t.Errorf("error is not ErrCannotSplit: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%s", w, err)
				}
			}
		})
	}

	// A ratio picks the model whose types the GPU offers.
	if pl, err := c.ResolveSplit(4, a16.gpu()); err != nil || pl.Profile != "a16-4q" {
		t.Errorf("ResolveSplit(4) on an A16 = %+v, %v", pl, err)
	}
	if pl, err := c.ResolveSplit(4, vfBoards()["a2"].gpu()); err != nil || pl.Profile != "a2-4q" {
		t.Errorf("ResolveSplit(4) on an A2 = %+v, %v", pl, err)
	}
}

// mdev types may be given by name only too: the PF lists its types, so the
// plan takes the directory it finds; VFs that do not exist yet list none.
func TestResolveNameOnlyMdevType(t *testing.T) {
	fsys := fstest.MapFS{
		"cat/t4.yaml": {Data: []byte(strings.Replace(mdevDoc, "id: nvidia-234, ", "", 1))},
		"cat/a100.yaml": {Data: []byte(`version: v1
model: NVIDIA A100 PCIe 40GB
match: {vendor: 10de, devices: [20f1]}
dialect: sriov-mdev
framebuffer-mb: 40960
profiles:
  - name: site-a100-10c
    split: 4
    mdev-type: {name: NVIDIA A100-10C}
`)},
	}
	c, err := LoadCatalog(fsys, "cat")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := c.Resolve("t4-16q", t4GPU())
	if err != nil || pl.MdevType != "nvidia-234" || pl.MdevTypeName != "GRID T4-16Q" {
		t.Errorf("Resolve(t4-16q) = %+v, %v", pl, err)
	}
	g := t4GPU()
	g.MdevTypes = g.MdevTypes[:2]
	if _, err := c.Resolve("t4-16q", g); err == nil || !strings.Contains(err.Error(), `does not offer mdev type "GRID T4-16Q"; it offers nvidia-222`) {
		t.Errorf("Resolve(t4-16q) without the type: %v", err)
	}

	if pl, err := c.Resolve("site-a100-10c", a100GPUWithVFs(20)); err != nil || pl.MdevType != "nvidia-471" {
		t.Errorf("Resolve on enabled VFs = %+v, %v", pl, err)
	}
	_, err = c.Resolve("site-a100-10c", a100GPU())
	if !errors.Is(err, ErrCannotSplit) || !strings.Contains(err.Error(), `the catalog gives "NVIDIA A100-10C" (mdev type) by name only`) ||
		!strings.Contains(err.Error(), "mdev_supported_types are not enabled") {
		t.Errorf("Resolve before the VFs exist: %v", err)
	}
}

// Names match as NVIDIA prints them: with or without the brand, and with
// the board before the type on newer boards; only whole words count.
func TestSameName(t *testing.T) {
	for _, tc := range []struct {
		hw, want string
		same     bool
	}{
		{"GRID T4-4Q", "GRID T4-4Q", true},
		{"GRID A100-4C", "NVIDIA A100-4C", true},
		{"NVIDIA RTX Pro 6000 Blackwell DC-48Q", "DC-48Q", true},
		{"NVIDIA RTX Pro 6000 Blackwell DC-48Q", "NVIDIA DC-48Q", true},
		{"NVIDIA DC-48Q", "NVIDIA RTX Pro 6000 Blackwell DC-48Q", true},
		{" NVIDIA  L40S-12Q\n", "NVIDIA L40S-12Q", true},
		{"NVIDIA RTX Pro 6000 Blackwell DC-48Q", "DC-8Q", false},
		{"NVIDIA T4-14Q", "NVIDIA T4-4Q", false},
		{"Single port serial", "Dual port serial", false},
		{"GVTg_V5_4", "GVTg_V5_8", false},
		{"NVIDIA A16-4Q", "", false},
	} {
		if got := sameName(tc.hw, tc.want); got != tc.same {
			t.Errorf("sameName(%q, %q) = %v", tc.hw, tc.want, got)
		}
	}
}

// Decode takes a type without its id, refuses an id given empty or not
// positive, and refuses one type name twice in a file; Encode writes the
// type back without an id.
func TestDecodeNameOnlyTypes(t *testing.T) {
	nameOnly := strings.Replace(nvidiaDoc, "{id: 1153, name: NVIDIA L40S-12Q}", "{name: NVIDIA L40S-12Q}", 1)
	f, err := Decode("l40s.yaml", []byte(nameOnly))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Profiles[0].NVIDIA; got != (NVIDIAType{Name: "NVIDIA L40S-12Q"}) {
		t.Errorf("NVIDIA = %+v", got)
	}
	out, err := Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "id:") {
		t.Errorf("Encode wrote an id:\n%s", out)
	}
	if g, err := Decode("l40s.yaml", out); err != nil || !sameFile(f, g) {
		t.Errorf("round trip: %v\n%s", err, out)
	}
	mdevOnly := strings.Replace(mdevDoc, "      id: nvidia-232\n", "", 1)
	if f, err := Decode("t4.yaml", []byte(mdevOnly)); err != nil || f.Profiles[1].Mdev != (MdevType{Name: "GRID T4-4Q"}) {
		t.Errorf("Decode(mdev name only) = %+v, %v", f, err)
	}

	for _, tc := range []struct {
		name, doc, field string
		want             []string
	}{
		{"mdev id empty", strings.Replace(mdevDoc, "id: nvidia-232", `id: ""`, 1), "profiles[1].mdev-type.id",
			[]string{"is empty", "or leave id out to find the type by name"}},
		{"nvidia id negative", strings.Replace(nvidiaDoc, "id: 1153", "id: -3", 1), "profiles[0].nvidia-type.id",
			[]string{"-3 is not a vGPU type id", "or leave id out"}},
		{"nvidia name missing", strings.Replace(nvidiaDoc, "{id: 1153, name: NVIDIA L40S-12Q}", "{id: 1153}", 1), "profiles[0].nvidia-type.name",
			[]string{"missing", "the type's name"}},
		{"nvidia type name twice", nameOnly + "  - name: l40s-12q-again\n    split: 4\n    nvidia-type: {name: L40S-12Q}\n",
			"profiles[1].nvidia-type.name", []string{"L40S-12Q is already the type of profiles[0]"}},
		{"mdev type name twice", mdevDoc + "  - name: t4-4q-again\n    split: 4\n    mdev-type: {name: GRID T4-4Q}\n",
			"profiles[2].mdev-type.name", []string{"GRID T4-4Q is already the type of profiles[1]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode("x.yaml", []byte(tc.doc))
			if err == nil {
				t.Fatalf("Decode succeeded:\n%s", tc.doc)
			}
			if findField(err, tc.field) == nil {
				t.Errorf("no error for %s:\n%v", tc.field, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}

	// A MIG-backed type may be given by name only: NVML's supported
	// types name it before any VF lists it (TestResolveNameOnlyMIGType).
	mig := strings.Replace(nameOnly, "    split: 4\n", "    split: 4\n    gpu-instance: {profile: 1g.12gb, id: 19}\n", 1)
	if _, err := Decode("l40s.yaml", []byte(mig)); err != nil {
		t.Errorf("Decode(MIG-backed type without id) = %v", err)
	}

	// Files built in code: id 0 is "none", a negative one is refused.
	f, _ = Decode("l40s.yaml", []byte(nvidiaDoc))
	f.Profiles[0].NVIDIA.ID = -1
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "-1 is not a vGPU type id") {
		t.Errorf("Validate(id -1) = %v", err)
	}
	f.Profiles[0].NVIDIA.ID = 0
	if err := f.Validate(); err != nil {
		t.Errorf("Validate(no id) = %v", err)
	}
}

// A MIG-backed type given by name only takes its id from NVML's supported
// types (no VF lists it before the carve made its GPU instances); without
// them the resolver refuses and says NVML is needed.
func TestResolveNameOnlyMIGType(t *testing.T) {
	c := loadBuiltIn(t)
	if p, _ := c.Get("h100-2-20c"); p.NVIDIA.ID != 0 || p.GPUInstance == nil {
		t.Fatalf("h100-2-20c = %+v: the test needs a MIG-backed type given by name only", p.Spec)
	}
	g := vfBoards()["h100"].gpu()
	g.SRIOV.NumVFs, g.SRIOV.VFs = 0, nil
	_, err := c.Resolve("h100-2-20c", g)
	if err == nil || !strings.Contains(err.Error(), `"NVIDIA H100-2-20C" (MIG-backed vGPU type) by name only`) ||
		!strings.Contains(err.Error(), "needs NVML") {
		t.Fatalf("Resolve without NVML's types = %v", err)
	}
	g.NVIDIATypes = []inventory.VGPUType{{ID: 7001, Name: "NVIDIA H100-1-10C"}, {ID: 7003, Name: "NVIDIA H100-2-20C"}}
	pl, err := c.Resolve("h100-2-20c", g)
	if err != nil {
		t.Fatal(err)
	}
	if pl.NVIDIATypeID != 7003 || pl.GPUInstance == nil || pl.GPUInstance.ID != 14 || pl.NumVFs != 3 {
		t.Errorf("plan = %+v, want NVML's id 7003 on 3 VFs, GPU instance profile 14", pl)
	}
}
