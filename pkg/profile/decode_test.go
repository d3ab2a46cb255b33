package profile

import (
	"errors"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/inventory"
)

// Valid files, one per backend selector; the cases below break them.
const (
	sriovDoc = `version: v1
model: AMD Radeon Instinct MI25
match:
  vendor: "1002"
  devices: ["6860"]
dialect: sriov
framebuffer-mb: 16384
profiles:
  - name: mi25-16g
    split: 1
  - name: mi25-8g
    split: 2
  - name: mi25-4g
    split: 4
    description: a quarter
`
	mdevDoc = `version: v1
model: NVIDIA Tesla T4
match:
  vendor: 10de
  devices: [1eb8]
dialect: mdev
framebuffer-mb: 16384
profiles:
  - name: t4-16q
    split: 1
    mdev-type: {id: nvidia-234, name: GRID T4-16Q}
  - name: t4-4q
    split: 4
    mdev-type:
      id: nvidia-232
      name: GRID T4-4Q
`
	nvidiaDoc = `version: v1
model: NVIDIA L40S
match:
  vendor: 10de
  devices: [26b9]
dialect: nvidia-vf
profiles:
  - name: l40s-12q
    split: 4
    nvidia-type: {id: 1153, name: NVIDIA L40S-12Q}
`
)

func TestDecodeValid(t *testing.T) {
	f, err := Decode("profiles/mi25.yaml", []byte(sriovDoc))
	if err != nil {
		t.Fatal(err)
	}
	if f.Model.VendorID != 0x1002 || len(f.Model.DeviceIDs) != 1 || f.Model.DeviceIDs[0] != 0x6860 {
		t.Errorf("ids = %04x:%04x", f.Model.VendorID, f.Model.DeviceIDs)
	}
	if f.Model.Dialect != inventory.DialectSRIOV || f.Model.FramebufferMB != 16384 || len(f.Profiles) != 3 {
		t.Errorf("model = %+v, %d profiles", f.Model, len(f.Profiles))
	}
	if s := f.Profiles[2]; s.Name != "mi25-4g" || s.Split != 4 || s.Description != "a quarter" {
		t.Errorf("profiles[2] = %+v", s)
	}

	f, err = Decode("t4.yaml", []byte(mdevDoc))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Profiles[1].Mdev; got != (MdevType{ID: "nvidia-232", Name: "GRID T4-4Q"}) {
		t.Errorf("mdev type = %+v", got)
	}
	f, err = Decode("l40s.yaml", []byte(nvidiaDoc))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Profiles[0].NVIDIA; got != (NVIDIAType{ID: 1153, Name: "NVIDIA L40S-12Q"}) {
		t.Errorf("nvidia type = %+v", got)
	}
}

// PCI ids are hex whatever YAML thinks they are: 1002 is an int to YAML,
// 1e30 a float, 0x10de an int in base 16.
func TestDecodeHexIDs(t *testing.T) {
	doc := strings.NewReplacer(`vendor: "1002"`, `vendor: 0x1002`, `["6860"]`, `[6860, 1e30, 0X686C]`).Replace(sriovDoc)
	f, err := Decode("x.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []uint16{0x6860, 0x1e30, 0x686c}
	if f.Model.VendorID != 0x1002 || len(f.Model.DeviceIDs) != 3 {
		t.Fatalf("ids = %04x:%04x", f.Model.VendorID, f.Model.DeviceIDs)
	}
	for i, id := range want {
		if f.Model.DeviceIDs[i] != id {
			t.Errorf("devices[%d] = %04x, want %04x", i, f.Model.DeviceIDs[i], id)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	const file = "profiles/mi25.yaml"
	const splits = "1 to 16"
	const fields = "version, model, match, dialect, framebuffer-mb, migration, source, profiles"
	cases := []struct {
		name     string
		doc      string
		old, new string // replaced once in doc; old "" replaces the whole doc
		field    string // FieldError.Field
		line     int    // 0: not checked
		want     []string
	}{
		// split
		{"split 0", sriovDoc, "split: 4", "split: 0", "profiles[2].split", 14, []string{"0 is not allowed", "allowed: " + splits}},
		{"split 17", sriovDoc, "split: 4", "split: 17", "profiles[2].split", 14, []string{"profiles/mi25.yaml:14: profiles[2].split: 17 is not allowed; allowed: 1 to 16"}},
		{"split -1", sriovDoc, "split: 4", "split: -1", "profiles[2].split", 14, []string{"-1 is not allowed"}},
		{"split huge", sriovDoc, "split: 4", "split: 99999999999", "profiles[2].split", 14, []string{"is not allowed"}},
		{"split text", sriovDoc, "split: 4", "split: four", "profiles[2].split", 14, []string{"four is not a whole number", "allowed: " + splits}},
		{"split float", sriovDoc, "split: 4", "split: 2.5", "profiles[2].split", 14, []string{"2.5 is not a whole number"}},
		{"split missing", sriovDoc, "    split: 4\n", "", "profiles[2].split", 0, []string{"missing", "allowed: " + splits}},
		{"split empty", sriovDoc, "split: 4", "split:", "profiles[2].split", 14, []string{"is empty", "allowed: " + splits}},
		{"split twice", sriovDoc, "split: 4\n", "split: 4\n    split: 8\n", "profiles[2].split", 15, []string{"is given twice (first on line 14)"}},
		{"split twice for sriov", sriovDoc, "split: 4", "split: 2", "profiles[2].split", 14, []string{"2 is already the split of profiles[1]", "allowed: one profile per split (and scheduler) for dialect sriov"}},
		// source
		{"source two lines", sriovDoc, "dialect: sriov\n", "dialect: sriov\nsource: \"a\\nb\"\n", "source", 7, []string{"is not one line of text", "allowed: one line naming where"}},
		// gim
		{"gim bad scheduler", sriovDoc, "split: 4", "split: 4\n    gim: {scheduler: fifo}", "profiles[2].gim.scheduler", 15, []string{"fifo is not a GIM scheduler", "allowed: round-robin-solid, predictable-performance, round-robin-liquid"}},
		{"gim interval too long", sriovDoc, "split: 4", "split: 4\n    gim: {scheduler: round-robin-liquid, interval-ms: 2001}", "profiles[2].gim.interval-ms", 15, []string{"2001 is out of range", "allowed: 0 (GIM's default, 6 ms) to 2000"}},
		{"gim scheduler missing", sriovDoc, "split: 4", "split: 4\n    gim: {interval-ms: 10}", "profiles[2].gim.scheduler", 0, []string{"missing"}},
		{"gim unknown field", sriovDoc, "split: 4", "split: 4\n    gim: {scheduler: round-robin-solid, quantum: 3}", "profiles[2].gim.quantum", 15, []string{"unknown field", "allowed: scheduler, interval-ms"}},
		// nvidia-scheduler
		{"scheduler bad policy", mdevDoc, "split: 4", "split: 4\n    nvidia-scheduler: {policy: fair}", "profiles[1].nvidia-scheduler.policy", 0, []string{"fair is not a vGPU scheduler policy", "allowed: best-effort, equal-share, fixed-share"}},
		{"scheduler slice too long", mdevDoc, "split: 4", "split: 4\n    nvidia-scheduler: {policy: equal-share, timeslice-ms: 31}", "profiles[1].nvidia-scheduler.timeslice-ms", 0, []string{"31 is out of range", "allowed: 1 to 30"}},
		{"scheduler best effort sliced", mdevDoc, "split: 4", "split: 4\n    nvidia-scheduler: {policy: best-effort, timeslice-ms: 2}", "profiles[1].nvidia-scheduler", 0, []string{"best-effort takes no time slice"}},
		{"scheduler slice and adaptive", mdevDoc, "split: 4", "split: 4\n    nvidia-scheduler: {policy: fixed-share, timeslice-ms: 2, adaptive: true}", "profiles[1].nvidia-scheduler", 0, []string{"sets both timeslice-ms and adaptive"}},
		{"scheduler adaptive not bool", mdevDoc, "split: 4", "split: 4\n    nvidia-scheduler: {policy: fixed-share, adaptive: yes}", "profiles[1].nvidia-scheduler.adaptive", 0, []string{"is not a boolean", "allowed: true or false"}},
		{"scheduler on sriov", sriovDoc, "split: 4", "split: 4\n    nvidia-scheduler: {policy: equal-share}", "profiles[2].nvidia-scheduler", 0, []string{"is NVIDIA's: not used by this model"}},
		// nvidia-mixed-size
		{"mixed size not bool", nvidiaDoc, "split: 4", "split: 4\n    nvidia-mixed-size: yes", "profiles[0].nvidia-mixed-size", 0, []string{"is not a boolean", "allowed: true or false"}},
		{"mixed size on mdev", mdevDoc, "split: 4", "split: 4\n    nvidia-mixed-size: true", "profiles[1].nvidia-mixed-size", 0, []string{"is NVIDIA's vGPU 17+ mode: not used by this model", "only on NVIDIA (10de) GPUs of dialect nvidia-vf"}},
		{"mixed size MIG-backed", nvidiaDoc, "split: 4", "split: 4\n    gpu-instance: {profile: 1g.12gb, id: 19}\n    nvidia-mixed-size: true", "profiles[0].nvidia-mixed-size", 0, []string{"is given with gpu-instance"}},
		{"mixed size fixed share", nvidiaDoc, "split: 4", "split: 4\n    nvidia-scheduler: {policy: fixed-share}\n    nvidia-mixed-size: true", "profiles[0].nvidia-mixed-size", 0, []string{"is given with the fixed-share scheduler", "NVIDIA supports no fixed share in mixed-size mode"}},
		// xe
		{"xe bad priority", sriovDoc, "split: 4", "split: 4\n    xe: {sched-priority: high}", "profiles[2].xe.sched-priority", 15, []string{"high is not a VF scheduling priority", "allowed: low, normal"}},
		{"xe quantum negative", sriovDoc, "split: 4", "split: 4\n    xe: {exec-quantum-ms: -1}", "profiles[2].xe.exec-quantum-ms", 15, []string{"-1 is out of range", "allowed: 0 (unlimited, xe's default) to 4294967295"}},
		{"xe timeout too large", sriovDoc, "split: 4", "split: 4\n    xe: {preempt-timeout-us: 4294967296}", "profiles[2].xe.preempt-timeout-us", 15, []string{"4294967296 is out of range"}},
		{"xe unknown field", sriovDoc, "split: 4", "split: 4\n    xe: {quantum: 3}", "profiles[2].xe.quantum", 15, []string{"unknown field", "allowed: exec-quantum-ms, preempt-timeout-us, sched-priority, vram-quota"}},
		{"xe quota not a size", sriovDoc, "split: 4", "split: 4\n    xe: {vram-quota: 4G}", "profiles[2].xe.vram-quota", 15, []string{"4G is neither pinned nor a size like 3456MiB or 3GiB", "allowed: pinned (the equal share"}},
		{"xe quota odd", sriovDoc, "split: 4", "split: 4\n    xe: {vram-quota: 1001MiB}", "profiles[2].xe.vram-quota", 15, []string{"1001 MiB is not a multiple of xe's 2 MiB granule"}},
		{"xe quota too big", sriovDoc, "split: 4", "split: 4\n    xe: {vram-quota: 5GiB}", "profiles[2].xe.vram-quota", 15, []string{"4 VFs of 5120 MiB exceed the model's 16384 MiB"}},
		{"xe quota zero", sriovDoc, "split: 4", "split: 4\n    xe: {vram-quota: 0MiB}", "profiles[2].xe.vram-quota", 15, []string{"neither pinned nor a size"}},
		{"xe on mdev", mdevDoc, "split: 4", "split: 4\n    xe: {exec-quantum-ms: 5}", "profiles[1].xe", 0, []string{"is not used by dialect mdev", "only with dialect sriov (Intel xe)"}},
		{"xe with gim", sriovDoc, "split: 4", "split: 4\n    gim: {scheduler: round-robin-solid}\n    xe: {exec-quantum-ms: 5}", "profiles[2].xe", 0, []string{"is given with gim"}},
		{"gim on mdev", mdevDoc, "split: 4", "split: 4\n    gim: {scheduler: round-robin-solid}", "profiles[1].gim", 0, []string{"is not used by dialect mdev", "only with dialect sriov"}},
		{"same split and scheduler", sriovDoc, "split: 4", "split: 2", "profiles[2].split", 14, []string{"2 is already the split of profiles[1]"}},
		{"mdev split 17", mdevDoc, "split: 4", "split: 17", "profiles[1].split", 13, []string{"17 is not allowed", "allowed: 1 to 16"}},
		{"nvidia split 0", nvidiaDoc, "split: 4", "split: 0", "profiles[0].split", 9, []string{"0 is not allowed", "allowed: 1 to 16"}},
		{"passthrough split 2", sriovDoc, "dialect: sriov", "dialect: passthrough", "profiles[1].split", 12, []string{"2 is not allowed", "allowed: 1"}},

		// version
		{"version missing", sriovDoc, "version: v1\n", "", "version", 1, []string{"version: missing", "allowed: v1"}},
		{"version v2", sriovDoc, "version: v1", "version: v2", "version", 1, []string{"version: v2 is not supported", "allowed: v1"}},
		{"version number", sriovDoc, "version: v1", "version: 1", "version", 1, []string{"1 is not supported", "allowed: v1"}},
		{"version list", sriovDoc, "version: v1", "version: [v1]", "version", 1, []string{"is a list, not a value", "allowed: v1"}},

		// unknown fields, everywhere
		{"unknown top field", sriovDoc, "dialect: sriov", "dialect: sriov\nvendor: amd", "vendor", 7, []string{"vendor: unknown field", "allowed: " + fields}},
		{"unknown profile field", sriovDoc, "split: 4", "splt: 4", "profiles[2].splt", 14, []string{"unknown field", "allowed: name, split, mdev-type, nvidia-type, gpu-instance, gim, xe, nvidia-scheduler, nvidia-mixed-size, vgpu-params, description"}},
		{"unknown match field", sriovDoc, `vendor: "1002"`, `vendor: "1002"` + "\n  subsystem: 0c35", "match.subsystem", 5, []string{"unknown field", "allowed: vendor, devices"}},
		{"unknown mdev-type field", mdevDoc, "name: GRID T4-4Q", "name: GRID T4-4Q\n      max: 4", "profiles[1].mdev-type.max", 17, []string{"unknown field", "allowed: id, name"}},
		{"merge key", sriovDoc, "    split: 4", "    <<: {split: 4}", "profiles[2]", 14, []string{"has a merge key (<<)", "allowed: name, split"}},

		// dialect
		{"bad dialect", sriovDoc, "dialect: sriov", "dialect: vgpu", "dialect", 6, []string{"vgpu is not a dialect", "allowed: sriov, mdev, sriov-mdev, nvidia-vf, passthrough"}},
		{"dialect missing", sriovDoc, "dialect: sriov\n", "", "dialect", 1, []string{"missing", "allowed: sriov, mdev"}},

		// names
		{"duplicate name", sriovDoc, "name: mi25-4g", "name: mi25-16g", "profiles[2].name", 13, []string{"mi25-16g is already the name of profiles[0]", "allowed: a name unique across the catalog"}},
		{"the built-in's name", sriovDoc, "name: mi25-4g", "name: passthrough", "profiles[2].name", 13, []string{"passthrough is the built-in profile that passes any GPU through", "allowed: another name, e.g. passthrough-full"}},
		{"uppercase name", sriovDoc, "name: mi25-4g", "name: MI25-4G", "profiles[2].name", 13, []string{"MI25-4G is not a valid profile name", "allowed: lowercase letters, digits and '-'"}},
		{"slash in name", sriovDoc, "name: mi25-4g", "name: mi25/4g", "profiles[2].name", 13, []string{"mi25/4g is not a valid profile name", "e.g. t4-4q"}},
		{"leading dash", sriovDoc, "name: mi25-4g", `name: "-mi25"`, "profiles[2].name", 13, []string{"-mi25 is not a valid profile name"}},
		{"space in name", sriovDoc, "name: mi25-4g", `name: "mi25 4g"`, "profiles[2].name", 13, []string{`"mi25 4g" is not a valid profile name`}},
		{"name too long", sriovDoc, "name: mi25-4g", "name: " + strings.Repeat("a", 64), "profiles[2].name", 13, []string{"is not a valid profile name", "at most 63"}},
		{"name missing", sriovDoc, "  - name: mi25-4g\n    split: 4", "  - split: 4", "profiles[2].name", 13, []string{"missing", "allowed: lowercase"}},

		// profiles list
		{"empty profiles", sriovDoc, sriovDoc[strings.Index(sriovDoc, "profiles:"):], "profiles: []\n", "profiles", 8, []string{"profiles: the list is empty", "allowed: one or more profiles"}},
		{"null profiles", sriovDoc, sriovDoc[strings.Index(sriovDoc, "profiles:"):], "profiles:\n", "profiles", 8, []string{"is empty, not a list"}},
		{"profiles missing", sriovDoc, sriovDoc[strings.Index(sriovDoc, "profiles:"):], "", "profiles", 1, []string{"profiles: missing", "allowed: a list of one or more profiles"}},
		{"profiles a mapping", sriovDoc, sriovDoc[strings.Index(sriovDoc, "profiles:"):], "profiles: {name: x}\n", "profiles", 8, []string{"is a mapping, not a list"}},
		{"profile a string", sriovDoc, "  - name: mi25-4g\n    split: 4\n    description: a quarter\n", "  - mi25-4g\n", "profiles[2]", 13, []string{"is the value mi25-4g, not a mapping"}},

		// ids
		{"device not hex", sriovDoc, `["6860"]`, `["6g60"]`, "match.devices[0]", 5, []string{"6g60 is not a PCI id", "allowed: 4 hex digits, e.g. 10de"}},
		{"device too short", sriovDoc, `["6860"]`, `[686]`, "match.devices[0]", 5, []string{"686 is not a PCI id", "allowed: 4 hex digits"}},
		{"device too long", sriovDoc, `["6860"]`, `[68600]`, "match.devices[0]", 5, []string{"68600 is not a PCI id"}},
		{"device ffff", sriovDoc, `["6860"]`, `[ffff]`, "match.devices[0]", 5, []string{"ffff is not a PCI device id", "other than 0000 and ffff"}},
		{"device twice", sriovDoc, `["6860"]`, `[6860, "6860"]`, "match.devices[1]", 5, []string{"6860 is listed twice", "allowed: each device id once"}},
		{"devices empty", sriovDoc, `["6860"]`, `[]`, "match.devices", 5, []string{"the list is empty", "allowed: one or more device ids"}},
		{"devices a string", sriovDoc, `["6860"]`, `"6860"`, "match.devices", 5, []string{"is the value 6860, not a list"}},
		{"vendor not hex", sriovDoc, `vendor: "1002"`, `vendor: amd`, "match.vendor", 4, []string{"amd is not a PCI id", "allowed: 4 hex digits"}},
		{"vendor zero", sriovDoc, `vendor: "1002"`, `vendor: "0000"`, "match.vendor", 4, []string{"0000 is not a PCI vendor id"}},
		{"vendor missing", sriovDoc, "  vendor: \"1002\"\n", "", "match.vendor", 3, []string{"missing", "allowed: 4 hex digits"}},
		{"match missing", sriovDoc, "match:\n  vendor: \"1002\"\n  devices: [\"6860\"]\n", "", "match", 1, []string{"match: missing", "allowed: a mapping of vendor, devices"}},

		// framebuffer
		{"framebuffer zero", sriovDoc, "framebuffer-mb: 16384", "framebuffer-mb: 0", "framebuffer-mb", 7, []string{"0 is not a size", "leave it out"}},
		{"framebuffer unit", sriovDoc, "framebuffer-mb: 16384", "framebuffer-mb: 16G", "framebuffer-mb", 7, []string{"16G is not a whole number", "in MiB"}},

		// backend selectors
		{"mdev-type on sriov", sriovDoc, "description: a quarter", "mdev-type: {id: x, name: y}", "profiles[2].mdev-type", 0, []string{"is not used by dialect sriov", "allowed: only with dialect mdev or sriov-mdev"}},
		{"nvidia-type on mdev", mdevDoc, "split: 1\n", "split: 1\n    nvidia-type: {id: 1, name: x}\n", "profiles[0].nvidia-type", 11, []string{"is not used by dialect mdev", "allowed: only with dialect nvidia-vf"}},
		{"mdev-type missing", mdevDoc, "    mdev-type: {id: nvidia-234, name: GRID T4-16Q}\n", "", "profiles[0].mdev-type", 0, []string{"missing", "e.g. {id: nvidia-232, name: GRID T4-4Q}"}},
		{"mdev id with slash", mdevDoc, "id: nvidia-232", "id: ../nvidia-232", "profiles[1].mdev-type.id", 15, []string{"../nvidia-232 is not an mdev type id", "allowed: a directory name under mdev_supported_types"}},
		{"mdev name missing", mdevDoc, "      name: GRID T4-4Q\n", "", "profiles[1].mdev-type.name", 0, []string{"missing", "allowed: the type's name attribute"}},
		{"mdev type twice", mdevDoc, "id: nvidia-232", "id: nvidia-234", "profiles[1].mdev-type.id", 15, []string{"nvidia-234 is already the type of profiles[0]"}},
		{"mdev-type a string", mdevDoc, "mdev-type: {id: nvidia-234, name: GRID T4-16Q}", "mdev-type: nvidia-234", "profiles[0].mdev-type", 11, []string{"is the value nvidia-234, not a mapping", "allowed: a mapping of id, name"}},
		{"nvidia-type missing", nvidiaDoc, "    nvidia-type: {id: 1153, name: NVIDIA L40S-12Q}\n", "", "profiles[0].nvidia-type", 0, []string{"missing", "e.g. {id: 1153, name: NVIDIA L40S-12Q}"}},
		{"nvidia id zero", nvidiaDoc, "id: 1153", "id: 0", "profiles[0].nvidia-type.id", 10, []string{"0 is not a vGPU type id", "allowed: a positive id"}},
		{"gpu-instance on mdev", mdevDoc, "split: 1\n", "split: 1\n    gpu-instance: {profile: 1g.5gb, id: 19}\n", "profiles[0].gpu-instance", 0, []string{"is not used by this model", "allowed: only on NVIDIA (10de) GPUs of dialect nvidia-vf"}},
		{"gpu-instance profile", nvidiaDoc, "    nvidia-type: {id: 1153, name: NVIDIA L40S-12Q}\n", "    nvidia-type: {id: 1153, name: NVIDIA L40S-12Q}\n    gpu-instance: {profile: 5gb, id: 19}\n", "profiles[0].gpu-instance.profile", 0, []string{"5gb is not a GPU instance profile", "e.g. 1g.5gb"}},
		{"gpu-instance id missing", nvidiaDoc, "    nvidia-type: {id: 1153, name: NVIDIA L40S-12Q}\n", "    nvidia-type: {id: 1153, name: NVIDIA L40S-12Q}\n    gpu-instance: {profile: 1g.5gb}\n", "profiles[0].gpu-instance.id", 11, []string{"id: missing", "the profile's id as nvidia-smi mig -lgip shows it"}},
		{"gpu-instance id negative", nvidiaDoc, "    nvidia-type: {id: 1153, name: NVIDIA L40S-12Q}\n", "    nvidia-type: {id: 1153, name: NVIDIA L40S-12Q}\n    gpu-instance: {profile: 1g.5gb, id: -1}\n", "profiles[0].gpu-instance.id", 0, []string{"-1 is not a profile id"}},
		{"gpu-instance unknown field", nvidiaDoc, "    nvidia-type: {id: 1153, name: NVIDIA L40S-12Q}\n", "    nvidia-type: {id: 1153, name: NVIDIA L40S-12Q}\n    gpu-instance: {profile: 1g.5gb, id: 19, slices: 1}\n", "profiles[0].gpu-instance.slices", 11, []string{"unknown field", "allowed: profile, id"}},
		{"nvidia id text", nvidiaDoc, "id: 1153", "id: L40S-12Q", "profiles[0].nvidia-type.id", 10, []string{"L40S-12Q is not a whole number", "allowed: a positive id"}},

		// text
		{"description two lines", sriovDoc, "description: a quarter", "description: \"a\\nquarter\"", "profiles[2].description", 15, []string{"is not one line of text"}},
		{"model blank", sriovDoc, "model: AMD Radeon Instinct MI25", `model: " "`, "model", 2, []string{"is not one line of text"}},

		// the file as a whole
		{"empty file", "", "", "", "", 0, []string{"profiles/mi25.yaml: the file is empty", "allowed: a mapping starting with version: v1"}},
		{"comments only", "# nothing\n", "", "", "", 0, []string{"the file is empty"}},
		{"list file", "- version: v1\n", "", "", "", 1, []string{"the file is a list, not a mapping", "allowed: a mapping of " + fields}},
		{"syntax", sriovDoc, "split: 4", "split: [4", "", 0, []string{"profiles/mi25.yaml:", "invalid YAML"}},
		{"two documents", sriovDoc + "---\nversion: v1\n", "", "", "", 16, []string{"a second YAML document", "allowed: one document per file"}},
		{"alias", sriovDoc, "split: 4", "split: *one", "profiles[2].split", 14, []string{"is an alias", "anchors and aliases are not supported"}},
		{"custom tag", sriovDoc, "split: 4", "split: !big 4", "profiles[2].split", 14, []string{"has the tag !big", "allowed: untagged values"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := tc.doc
			if tc.old != "" {
				if !strings.Contains(doc, tc.old) {
					t.Fatalf("bad case: %q not in the document", tc.old)
				}
				doc = strings.Replace(doc, tc.old, tc.new, 1)
			}
			if tc.name == "alias" {
				doc = strings.Replace(doc, "split: 1", "split: &one 1", 1)
			}
			f, err := Decode(file, []byte(doc))
			if err == nil {
				t.Fatalf("Decode succeeded: %+v\n%s", f, doc)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not match ErrInvalid: %v", err)
			}
			msg := err.Error()
			for _, w := range append([]string{file}, tc.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not say %q:\n%s", w, msg)
				}
			}
			fe := findField(err, tc.field)
			if fe == nil {
				t.Fatalf("no error for field %q:\n%s", tc.field, msg)
			}
			if fe.File != file {
				t.Errorf("File = %q", fe.File)
			}
			if tc.line != 0 && fe.Line != tc.line {
				t.Errorf("Line = %d, want %d:\n%s", fe.Line, tc.line, msg)
			}
			if tc.field != "" && !strings.Contains(msg, file+":") {
				t.Errorf("no file:line prefix:\n%s", msg)
			}
		})
	}
}

// Every problem of a file is reported at once, in file order, each once.
func TestDecodeReportsAllProblemsOnce(t *testing.T) {
	doc := strings.NewReplacer(
		"version: v1", "version: v9",
		`["6860"]`, `[zz]`,
		"split: 4", "split: 17",
		"name: mi25-8g", "name: Mi25",
	).Replace(sriovDoc)
	_, err := Decode("x.yaml", []byte(doc))
	if err == nil {
		t.Fatal("Decode succeeded")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		"x.yaml:1: version: v9 is not supported",
		"x.yaml:5: match.devices[0]: zz is not a PCI id",
		"x.yaml:11: profiles[1].name: Mi25 is not a valid profile name",
		"x.yaml:14: profiles[2].split: 17 is not allowed",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d = %q, want prefix %q", i, lines[i], w)
		}
	}
}

func TestValidateBuiltInCode(t *testing.T) {
	f := &File{Path: "code", Version: Version, Model: Model{Name: "X", VendorID: 0x10de, DeviceIDs: []uint16{1}, Dialect: inventory.DialectSRIOV},
		Profiles: []Spec{{Name: "x-1", Split: 17}}}
	err := f.Validate()
	if err == nil || !strings.Contains(err.Error(), "code: profiles[0].split: 17 is not allowed; allowed: 1 to 16") {
		t.Errorf("Validate = %v", err)
	}
	f.Profiles[0].Split = 2
	if err := f.Validate(); err != nil {
		t.Errorf("Validate = %v", err)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	// Values YAML would type as something else stay text.
	odd := strings.NewReplacer("description: a quarter", "description: 2024-01-01",
		"model: AMD Radeon Instinct MI25", "model: 3090", `["6860"]`, "[1e30]").Replace(sriovDoc)
	// Two profiles of one split that differ in GIM's scheduler are two things.
	gim := sriovDoc + "  - name: mi25-4g-liquid\n    split: 4\n    gim: {scheduler: round-robin-liquid, interval-ms: 10}\n"
	xe := sriovDoc + "  - name: mi25-4g-rt\n    split: 4\n    xe: {exec-quantum-ms: 10, preempt-timeout-us: 20000, sched-priority: normal}\n" +
		"  - name: mi25-4g-pin\n    split: 4\n    xe: {vram-quota: pinned}\n  - name: mi25-2g-pin\n    split: 8\n    xe: {vram-quota: 2GiB}\n"
	src := strings.Replace(sriovDoc, "dialect: sriov\n", "dialect: sriov\nsource: 'GIM docs: https://example.org/gim#types, \"vf_num\"'\n", 1)
	// Two profiles of one type that differ in the scheduler are two things.
	sched := mdevDoc + "  - name: t4-4q-equal\n    split: 4\n    mdev-type: {id: nvidia-232, name: GRID T4-4Q}\n    nvidia-scheduler: {policy: equal-share, timeslice-ms: 2}\n" +
		"  - name: t4-4q-adaptive\n    split: 4\n    mdev-type: {id: nvidia-232, name: GRID T4-4Q}\n    nvidia-scheduler: {policy: fixed-share, adaptive: true}\n"
	// A profile that differs in mixed-size mode alone is another thing.
	mixed := nvidiaDoc + "  - name: l40s-12q-mixed\n    split: 4\n    nvidia-type: {id: 1153, name: NVIDIA L40S-12Q}\n    nvidia-mixed-size: true\n"
	for _, doc := range []string{sriovDoc, mdevDoc, nvidiaDoc, odd, gim, xe, sched, src, mixed} {
		f, err := Decode("a.yaml", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		out, err := Encode(f)
		if err != nil {
			t.Fatal(err)
		}
		g, err := Decode("a.yaml", out)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !sameFile(f, g) {
			t.Errorf("round trip changed the file:\n%+v\n%+v\n%s", f, g, out)
		}
	}
}

// findField returns the FieldError about field among err's joined errors.
func findField(err error, field string) *FieldError {
	var all []error
	if j, ok := err.(interface{ Unwrap() []error }); ok && !isField(err) {
		all = j.Unwrap()
	} else {
		all = []error{err}
	}
	for _, e := range all {
		var fe *FieldError
		if errors.As(e, &fe) && fe.Field == field {
			return fe
		}
	}
	return nil
}

func isField(err error) bool {
	_, ok := err.(*FieldError)
	return ok
}

// TestDecodeMigration: the migration block, and its bad values.
func TestDecodeMigration(t *testing.T) {
	doc := func(mig string) []byte {
		return []byte("version: v1\nmodel: M\nmatch: {mdev-parent: mtty}\ndialect: mdev\n" + mig + "profiles:\n  - name: m-1\n    split: 1\n    mdev-type: {id: mtty-1, name: Single port serial}\n")
	}
	f, err := Decode("m.yaml", doc("migration:\n  stop-copy: 0\n  pause: true\n  dirty-tracking: none\n"))
	if err != nil || f.Model.Migration == nil || f.Model.Migration.NoPause || f.Model.Migration.DirtyTracking != "none" {
		t.Fatalf("decode = %+v, %v", f, err)
	}
	f, err = Decode("m.yaml", doc("migration:\n  stop-copy: framebuffer\n  pause: false\n"))
	if err != nil || !f.Model.Migration.StopCopyFramebuffer || !f.Model.Migration.NoPause {
		t.Fatalf("decode = %+v, %v", f.Model.Migration, err)
	}
	if f, _ := Decode("m.yaml", doc("")); f.Model.Migration != nil {
		t.Fatal("a model without a migration block migrates")
	}
	for _, c := range []struct{ mig, want string }{
		{"migration:\n  stop-copy: lots\n", `m.yaml:6: migration.stop-copy: lots is neither framebuffer nor a number of MiB`},
		{"migration:\n  pause: maybe\n", `migration.pause: maybe is not a boolean`},
		{"migration:\n  dirty-tracking: magic\n", `magic is not a tracking mode; allowed: device, iommu or none`},
		{"migration:\n  speed: 9\n", "migration.speed: unknown field; allowed: stop-copy, pause, dirty-tracking"},
	} {
		if _, err := Decode("m.yaml", doc(c.mig)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want %q", c.mig, err, c.want)
		}
	}
}

// TestDecodeVGPUParams: NVIDIA's plugin parameters as a profile attribute,
// in NVIDIAParams' order whatever the file's; a second profile of a type
// may differ only in them; bad names, values and models are refused.
func TestDecodeVGPUParams(t *testing.T) {
	doc := mdevDoc + "  - name: t4-4q-nofrl\n    split: 4\n    mdev-type: {id: nvidia-232, name: GRID T4-4Q}\n    vgpu-params: {disable_vnc: 1, frame_rate_limiter: 0}\n"
	f, err := Decode("t4.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Profiles[2]
	if got := s.ParamsLine(); got != "frame_rate_limiter=0, disable_vnc=1" {
		t.Errorf("ParamsLine = %q", got)
	}
	if f.Profiles[1].ParamsLine() != "" {
		t.Errorf("t4-4q has params %q", f.Profiles[1].ParamsLine())
	}
	out, err := Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := Decode("t4.yaml", out); err != nil || !sameFile(f, g) {
		t.Errorf("round trip: %v\n%s", err, out)
	}
	nv := nvidiaDoc + "    vgpu-params: {enable_uvm: 1}\n"
	if f, err := Decode("l40s.yaml", []byte(nv)); err != nil || f.Profiles[0].ParamsLine() != "enable_uvm=1" {
		t.Errorf("nvidia-vf params: %v", err)
	}
	for _, c := range []struct{ doc, want string }{
		{strings.Replace(doc, "disable_vnc: 1", "disable_vnc: 2", 1), "profiles[2].vgpu-params.disable_vnc: 2 is not allowed; allowed: 0 or 1"},
		{strings.Replace(doc, "disable_vnc: 1", "vgpu-placement-id: 3", 1), "vgpu-placement-id: unknown field; allowed: frame_rate_limiter, disable_vnc"},
		{mdevDoc + "  - name: t4-4q-again\n    split: 4\n    mdev-type: {id: nvidia-232, name: GRID T4-4Q}\n", "nvidia-232 is already the type of profiles[1]"},
		{sriovDoc + "    vgpu-params: {frame_rate_limiter: 0}\n", "vgpu-params: is NVIDIA's: not used by this model"},
	} {
		if _, err := Decode("t4.yaml", []byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v; want %q", err, c.want)
		}
	}
}
