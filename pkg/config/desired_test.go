package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

func catalog(t *testing.T) *profile.Catalog {
	t.Helper()
	cat, err := profile.Load()
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func gpu(addr string, vendor, device uint16) inventory.GPU {
	return inventory.GPU{Address: pci.MustParseAddress(addr), VendorID: vendor, DeviceID: device, NUMANode: -1, IOMMUGroup: -1}
}

// host is a mixed host with two T4s, built directly.
func host() []inventory.GPU {
	return []inventory.GPU{
		gpu("0000:00:02.0", 0x8086, 0x3e92),
		gpu("0000:03:00.0", 0x1002, 0x6860),
		gpu("0000:3b:00.0", 0x10de, 0x1eb8),
		gpu("0000:5e:00.0", 0x10de, 0x1eb8),
		gpu("0000:86:00.0", 0x10de, 0x26b9),
	}
}

func parse(t *testing.T, doc string) *Config {
	t.Helper()
	c, err := Parse("config.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func assignments(as []Assignment) string {
	s := ""
	for _, a := range as {
		s += fmt.Sprintf("%s=%s#%d ", a.GPU, a.Profile, a.Entry)
	}
	return s
}

// TestDesiredExample resolves examples/config.yaml on the simulated host
// it was written for.
func TestDesiredExample(t *testing.T) {
	k := simkernel.NewExample(t, "mixed.yaml")
	gpus, err := inventory.Discover(k, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load("../../examples/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Desired(gpus, catalog(t))
	if err != nil {
		t.Fatal(err)
	}
	want := "0000:00:02.0=gvtg-4#3 0000:03:00.0=mi25-4g#0 0000:3b:00.0=t4-4q#1 0000:86:00.0=l40s-12q#2 "
	if assignments(got) != want {
		t.Errorf("Desired = %s\nwant      %s", assignments(got), want)
	}
}

func TestDesiredSelectors(t *testing.T) {
	c := parse(t, `version: v1
gpus:
  - id: 10de:1eb8
    profile: t4-4q
  - address: 03:00.0
    profile: mi25-2g
  - all: true
    profile: l40s-3q
  - id: "1002:6929"
    profile: s7150-1g
  - all: true
    profile: a100-10c
`)
	got, err := c.Desired(host(), catalog(t))
	if err != nil {
		t.Fatal(err)
	}
	// Both T4s by id; nothing for the S7150 and A100 entries, which this
	// host lacks; the GVT-g GPU is not in the config.
	want := "0000:03:00.0=mi25-2g#1 0000:3b:00.0=t4-4q#0 0000:5e:00.0=t4-4q#0 0000:86:00.0=l40s-3q#2 "
	if assignments(got) != want {
		t.Errorf("Desired = %s\nwant      %s", assignments(got), want)
	}
	got, err = Default().Desired(host(), catalog(t))
	if err != nil || len(got) != 0 {
		t.Errorf("default config: %v, %v", got, err)
	}
}

// rejected is a config the desired state refuses: with an error of kind
// (nil: any), whose field errors are want.
type rejected struct {
	name string
	doc  string
	kind error
	want []want
}

// checkRejected checks that err refuses tc's config as tc says; made is
// what came of it, shown when nothing was refused.
func checkRejected(t *testing.T, tc rejected, err error, made string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; assignments %s", made)
	}
	if tc.kind != nil && !errors.Is(err, tc.kind) {
		t.Errorf("error does not match %v: %v", tc.kind, err)
	}
	checkFieldErrors(t, err, "config.yaml", tc.want)
}

func TestDesiredErrors(t *testing.T) {
	for _, tc := range []rejected{
		{"address not on host", "version: v1\ngpus:\n  - address: 0000:04:00.0\n    profile: mi25-4g\n", ErrNoSuchGPU, []want{
			{3, "gpus[0].address", "no GPU at 0000:04:00.0 on this host", "0000:00:02.0, 0000:03:00.0, 0000:3b:00.0, 0000:5e:00.0, 0000:86:00.0"},
		}},
		{"unknown profile by address", "version: v1\ngpus:\n  - address: 0000:3b:00.0\n    profile: t4-3q\n", profile.ErrUnknownProfile, []want{
			{4, "gpus[0].profile", `unknown profile t4-3q`, "t4-16q, t4-8q, t4-4q, t4-4q-equal, t4-2q, t4-1q"},
		}},
		{"unknown profile by id", "version: v1\ngpus:\n  - id: 1002:6860\n    profile: mi25-3g\n", profile.ErrUnknownProfile, []want{
			{4, "gpus[0].profile", `unknown profile mi25-3g`, "mi25-16g, mi25-8g, mi25-4g, mi25-2g, mi25-1g"},
		}},
		{"unknown profile for all", "version: v1\ngpus:\n  - all: true\n    profile: h100-12c\n", profile.ErrUnknownProfile, []want{
			{4, "gpus[0].profile", `unknown profile h100-12c`, "a100-40c"},
		}},
		{"profile for another GPU", "version: v1\ngpus:\n  - address: 0000:03:00.0\n    profile: t4-4q\n", profile.ErrWrongGPU, []want{
			{4, "gpus[0].profile", "t4-4q is for NVIDIA Tesla T4 (10de:1eb8); 0000:03:00.0 is 1002:6860", "mi25-16g"},
		}},
		{"profile for another id", "version: v1\ngpus:\n  - id: 10de:26b9\n    profile: t4-4q\n", profile.ErrWrongGPU, []want{
			{4, "gpus[0].profile", "t4-4q is for NVIDIA Tesla T4 (10de:1eb8), not 10de:26b9", "l40s-3q"},
		}},
		{"address and id claim one GPU", "version: v1\ngpus:\n  - address: 0000:3b:00.0\n    profile: t4-16q\n  - id: 10de:1eb8\n    profile: t4-4q\n", ErrConflict, []want{
			{5, "gpus[1]", "id 10de:1eb8 selects 0000:3b:00.0, which gpus[0] (line 3, address 0000:3b:00.0) already selects", "one entry per GPU"},
		}},
		{"two alls for one model", "version: v1\ngpus:\n  - all: true\n    profile: t4-16q\n  - all: true\n    profile: t4-4q\n", ErrConflict, []want{
			{5, "gpus[1]", "selects 0000:3b:00.0, which gpus[0] (line 3", ""},
			{5, "gpus[1]", "selects 0000:5e:00.0, which gpus[0] (line 3", ""},
		}},
		{"more pins than the split", "version: v1\ngpus:\n  - address: 0000:3b:00.0\n    profile: t4-16q\n    mdev-uuids: [" + pins(2) + "]\n", ErrPins, []want{
			{5, "gpus[0].mdev-uuids", "pins 2 mdev UUIDs, more than the split of t4-16q (1)", "at most 1 (the profile's split)"},
		}},
		{"pins on a VF profile", "version: v1\ngpus:\n  - address: 0000:86:00.0\n    profile: l40s-12q\n    mdev-uuids: [" + pins(1) + "]\n", ErrPins, []want{
			{5, "gpus[0].mdev-uuids", "l40s-12q makes no mdevs (dialect nvidia-vf)", "dialect mdev or sriov-mdev"},
		}},
		{"pins on an SR-IOV profile", "version: v1\ngpus:\n  - address: 0000:03:00.0\n    profile: mi25-4g\n    mdev-uuids: [" + pins(1) + "]\n", ErrPins, []want{
			{5, "gpus[0].mdev-uuids", "mi25-4g makes no mdevs (dialect sriov)", "leave it out here"},
		}},
		{"every problem, in file order", "version: v1\ngpus:\n  - address: 0000:99:00.0\n    profile: mi25-4g\n  - all: true\n    profile: nope\n", nil, []want{
			{3, "gpus[0].address", "no GPU at 0000:99:00.0", ""},
			{6, "gpus[1].profile", "unknown profile nope", ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse(t, tc.doc).Desired(host(), catalog(t))
			checkRejected(t, tc, err, assignments(got))
		})
	}
}

// Old GIM sets one VF count and one scheduler for every GPU it drives: a
// config giving two S7150s different splits, or one split with different
// schedulers, names the entry; the same profile for both passes.
func TestDesiredGIMOneSplit(t *testing.T) {
	gim := []inventory.GPU{gpu("0000:3d:00.0", 0x1002, 0x6929), gpu("0000:3e:00.0", 0x1002, 0x6929), gpu("0000:3b:00.0", 0x10de, 0x1eb8)}
	ok := "version: v1\ngpus:\n  - all: true\n    profile: s7150-2g\n  - address: 0000:3b:00.0\n    profile: t4-1q\n"
	if got, err := parse(t, ok).Desired(gim, catalog(t)); err != nil || len(got) != 3 {
		t.Fatalf("one profile for both S7150s: %s, %v", assignments(got), err)
	}
	for _, second := range []string{"s7150-1g", "s7150-2g-liquid"} {
		doc := "version: v1\ngpus:\n  - address: 0000:3d:00.0\n    profile: s7150-2g\n  - address: 0000:3e:00.0\n    profile: " + second + "\n"
		_, err := parse(t, doc).Desired(gim, catalog(t))
		if !errors.Is(err, ErrGIMMixed) {
			t.Fatalf("s7150-2g and %s: %v", second, err)
		}
		checkFieldErrors(t, err, "config.yaml", []want{{6, "gpus[1].profile",
			second + " on 0000:3e:00.0 differs from s7150-2g on 0000:3d:00.0 (gpus[0]) in its split or scheduler", "one profile for every GPU old AMD GIM drives"}})
	}
}

func TestDesiredNoGPUs(t *testing.T) {
	_, err := parse(t, "version: v1\ngpus:\n  - address: 0000:03:00.0\n    profile: mi25-4g\n").Desired(nil, catalog(t))
	checkFieldErrors(t, err, "config.yaml", []want{{3, "gpus[0].address", "no GPU at 0000:03:00.0", "none: this host has no GPU"}})
}

// labCatalog is the catalog plus the lab's test profiles for the kernel's
// mbochs sample (a virtual mdev parent).
func labCatalog(t *testing.T) *profile.Catalog {
	t.Helper()
	cat, err := profile.Load("../../e2e/lab/profiles")
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func TestDesiredParents(t *testing.T) {
	c := parse(t, "version: v1\ngpus:\n  - parent: mbochs\n    profile: lab-mbochs-64m\n  - address: 0000:3b:00.0\n    profile: t4-4q\n")
	as, err := c.Desired(host(), labCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := assignments(as); got != "0000:3b:00.0=t4-4q#1 " {
		t.Errorf("Desired = %s: the parent entry is DesiredParents'", got)
	}
	ps, err := c.DesiredParents(labCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || !reflect.DeepEqual(ps[0], ParentAssignment{Parent: "mbochs", Profile: "lab-mbochs-64m", Entry: 0}) {
		t.Errorf("DesiredParents = %+v", ps)
	}
}

// pins is n distinct mdev UUIDs, comma-separated.
func pins(n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("a1b2c3d4-0000-4000-8000-%012x", i)
	}
	return strings.Join(out, ", ")
}

// Pinned UUIDs travel with their GPU's or parent's assignment, lower-cased
// and in file order.
func TestDesiredPins(t *testing.T) {
	c := parse(t, "version: v1\ngpus:\n  - address: 0000:3b:00.0\n    profile: t4-4q\n    mdev-uuids: [A1B2C3D4-0000-4000-8000-000000000001, "+pins(1)+"]\n"+
		"  - parent: mbochs\n    profile: lab-mbochs-64m\n    mdev-uuids: [2f1e0d9c-8b7a-4c6d-9e5f-4a3b2c1d0e9f]\n")
	as, err := c.Desired(host(), labCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a1b2c3d4-0000-4000-8000-000000000001", "a1b2c3d4-0000-4000-8000-000000000000"}
	if len(as) != 1 || !reflect.DeepEqual(as[0].MdevUUIDs, want) {
		t.Errorf("Desired = %+v, want the T4 with %v", as, want)
	}
	ps, err := c.DesiredParents(labCatalog(t))
	if err != nil || len(ps) != 1 || !reflect.DeepEqual(ps[0].MdevUUIDs, []string{"2f1e0d9c-8b7a-4c6d-9e5f-4a3b2c1d0e9f"}) {
		t.Errorf("DesiredParents = %+v, %v", ps, err)
	}
}

func TestDesiredParentsErrors(t *testing.T) {
	for _, tc := range []rejected{
		{"unknown profile", "version: v1\ngpus:\n  - parent: mbochs\n    profile: lab-mbochs-8m\n", profile.ErrUnknownProfile, []want{
			{4, "gpus[0].profile", "unknown profile lab-mbochs-8m", "lab-mbochs-64m, lab-mbochs-16m"},
		}},
		{"GPU profile on a parent", "version: v1\ngpus:\n  - parent: mbochs\n    profile: t4-4q\n", profile.ErrWrongGPU, []want{
			{4, "gpus[0].profile", "t4-4q is for NVIDIA Tesla T4, not the mdev parent mbochs", "lab-mbochs-64m"},
		}},
		{"parent without profiles", "version: v1\ngpus:\n  - parent: mdpy\n    profile: lab-mbochs-64m\n", profile.ErrWrongGPU, []want{
			{4, "gpus[0].profile", "not the mdev parent mdpy", "none: no profile in the catalog matches mdev-parent: mdpy"},
		}},
		{"more pins than the split", "version: v1\ngpus:\n  - parent: mbochs\n    profile: lab-mbochs-64m\n    mdev-uuids: [" + pins(5) + "]\n", ErrPins, []want{
			{5, "gpus[0].mdev-uuids", "pins 5 mdev UUIDs, more than the split of lab-mbochs-64m (4)", "at most 4"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse(t, tc.doc).DesiredParents(labCatalog(t))
			checkRejected(t, tc, err, fmt.Sprintf("%+v", got))
		})
	}
}

// The built-in passthrough takes any GPU, by address, id or all: a GPU no
// catalog file knows (1af4:1050 here) among them.
func TestDesiredPassthrough(t *testing.T) {
	gpus := append(host(), gpu("0000:07:00.0", 0x1af4, 0x1050))
	for doc, want := range map[string]string{
		"version: v1\ngpus:\n  - address: 0000:07:00.0\n    profile: passthrough\n":                                            "0000:07:00.0=passthrough#0 ",
		"version: v1\ngpus:\n  - id: \"1af4:1050\"\n    profile: passthrough\n  - address: 0000:3b:00.0\n    profile: t4-4q\n": "0000:07:00.0=passthrough#0 0000:3b:00.0=t4-4q#1 ",
	} {
		as, err := parse(t, doc).Desired(gpus, catalog(t))
		if err != nil || assignments(as) != want {
			t.Errorf("%q: %s, %v; want %s", doc, assignments(as), err, want)
		}
	}
	as, err := parse(t, "version: v1\ngpus:\n  - all: true\n    profile: passthrough\n").Desired(gpus, catalog(t))
	if err != nil || len(as) != len(gpus) {
		t.Errorf("all: %s, %v; want every GPU", assignments(as), err)
	}
}
