package mdevctl_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/mdevctl"
	"github.com/vgpu-project/vgpu/pkg/mdevctl/mdevctltest"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// The fixtures' definitions (testdata/README.md).
const (
	gvtgManual = "c07ab7b2-8aa2-427a-91c6-ffc949bb77f9"
	gvtgAuto   = "5269fe7a-18d1-48ad-88e1-3fda4176f536"
	apManual   = "783e6dbb-ea0e-411f-94e2-717eaad438bf"
	t4Auto     = "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44"
	t4Params   = "0b6f3c1e-2d4a-4e5b-8c7d-9e0f1a2b3c4d"
	mbochsDef  = "2f1e0d9c-8b7a-4c6d-9e5f-4a3b2c1d0e9f"
)

func fixtures(t *testing.T) map[string][]byte {
	return map[string][]byte{
		"0000:00:02.0/" + gvtgManual: mdevctltest.Fixture(t, "mdevctl-load-json/"+gvtgManual+".in"),
		"0000:00:02.0/" + gvtgAuto:   mdevctltest.Fixture(t, "mdevctl-load-json/"+gvtgAuto+".in"),
		"0001:00:03.1/" + apManual:   mdevctltest.Fixture(t, "mdevctl-load-json/"+apManual+".in"),
		"0000:3b:00.0/" + t4Auto:     mdevctltest.Fixture(t, "debian-define/"+t4Auto),
		"0000:3b:00.0/" + t4Params:   mdevctltest.Fixture(t, "debian-define/"+t4Params),
		"mbochs/" + mbochsDef:        mdevctltest.Fixture(t, "debian-define/"+mbochsDef),
	}
}

func TestReadFixtures(t *testing.T) {
	files := fixtures(t)
	// What mdevctl passes over: a name that is no UUID, a UUID in upper
	// case without dashes (a UUID to mdevctl, named canonically), a
	// symlink, a file beside the parents, scripts.d.
	files["0000:3b:00.0/README"] = []byte("not a definition")
	files["0000:3b:00.0/AB4D0E5A7C2B4F1E9D3C8B7A6F5E4D3C"] = []byte(`{"mdev_type": "nvidia-232", "start": "auto"}`)
	files["stray"] = []byte("{}")
	files["scripts.d/callouts/a1b2c3d4-0000-4000-8000-000000000000"] = []byte(`{"mdev_type": "x", "start": "auto"}`)
	dir := mdevctltest.Dir(t, files)
	if err := os.Symlink(filepath.Join(dir, "0000:3b:00.0", t4Auto), filepath.Join(dir, "0000:3b:00.0", "0e0e0e0e-0000-4000-8000-000000000000")); err != nil {
		t.Fatal(err)
	}
	defs, bad, err := mdevctl.Read(dir)
	if err != nil || len(bad) != 0 {
		t.Fatalf("Read: %v, bad %v", err, bad)
	}
	type short struct {
		Parent, UUID, Type, Start string
		Attrs                     int
	}
	var got []short
	for _, d := range defs {
		got = append(got, short{d.Parent, d.UUID, d.Type, d.Start, len(d.Attrs)})
	}
	want := []short{
		{"0000:00:02.0", gvtgAuto, "i915-GVTg_V5_8", "auto", 0},
		{"0000:00:02.0", gvtgManual, "i915-GVTg_V5_8", "manual", 5},
		{"0000:3b:00.0", t4Params, "nvidia-232", "manual", 1},
		{"0000:3b:00.0", t4Auto, "nvidia-232", "auto", 0},
		{"0000:3b:00.0", "ab4d0e5a-7c2b-4f1e-9d3c-8b7a6f5e4d3c", "nvidia-232", "auto", 0},
		{"0001:00:03.1", apManual, "vfio_ap-passthrough", "manual", 6},
		{"mbochs", mbochsDef, "mbochs-large", "manual", 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Read:\n got %+v\nwant %+v", got, want)
	}
	// Attributes keep their order: mdevctl writes them so.
	var ap mdevctl.Definition
	for _, d := range defs {
		if d.UUID == apManual {
			ap = d
		}
	}
	wantAttrs := []mdevctl.Attr{{"assign_adapter", "5"}, {"assign_adapter", "6"}, {"assign_domain", "0xab"},
		{"assign_control_domain", "0xab"}, {"assign_domain", "4"}, {"assign_control_domain", "4"}}
	if !reflect.DeepEqual(ap.Attrs, wantAttrs) || ap.Auto() {
		t.Errorf("vfio_ap definition: %+v", ap)
	}
	if p := filepath.Join(dir, "0001:00:03.1", apManual); ap.Path != p {
		t.Errorf("path %s, want %s", ap.Path, p)
	}

	if defs, bad, err := mdevctl.Read(filepath.Join(t.TempDir(), "none")); defs != nil || bad != nil || err != nil {
		t.Errorf("Read of a missing dir: %v %v %v; want nothing", defs, bad, err)
	}
}

// TestReadAsMdevctl: a file is refused where mdevctl's load_from_json and
// add_attributes refuse it (e2e/simhost TestMdevctlReadsAsVgpu runs Debian's
// mdevctl on the same cases), and read as mdevctl reads it otherwise.
func TestReadAsMdevctl(t *testing.T) {
	for _, c := range mdevctltest.ReadCases() {
		t.Run(c.Name, func(t *testing.T) {
			dir := mdevctltest.Dir(t, map[string][]byte{"0000:3b:00.0/" + t4Auto: []byte(c.JSON)})
			defs, bad, err := mdevctl.Read(dir)
			if err != nil {
				t.Fatal(err)
			}
			if c.Refused {
				if len(bad) != 1 || len(defs) != 0 || !errors.Is(bad[0], mdevctl.ErrDefinition) || !strings.Contains(bad[0].Error(), t4Auto) {
					t.Fatalf("defs %+v, bad %v; want it refused", defs, bad)
				}
				return
			}
			if len(bad) != 0 || len(defs) != 1 || defs[0].Type != c.Type || defs[0].Auto() != c.Auto {
				t.Fatalf("defs %+v, bad %v; want type %s, auto %v", defs, bad, c.Type, c.Auto)
			}
		})
	}
}

func newHost(t *testing.T) *simkernel.Kernel {
	t.Helper()
	k, err := simkernel.New(simkernel.Host{Version: "v1", NVIDIADriver: "535.230.02", GPUs: []simkernel.HostGPU{
		{Model: "t4", Address: t4}, {Model: "a100", Address: a100}, {Model: "mbochs"}}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var (
	t4   = pci.MustParseAddress("0000:3b:00.0")
	a100 = pci.MustParseAddress("0000:65:00.0")
)

func TestCheck(t *testing.T) {
	k := newHost(t)
	auto := func(typ string) []byte { return []byte(`{"mdev_type": "` + typ + `", "start": "auto", "attrs": []}`) }
	manual := func(typ string) []byte { return []byte(`{"mdev_type": "` + typ + `", "start": "manual", "attrs": []}`) }
	vf1 := "0000:65:00.5" // A100: first VF at offset 4, stride 1
	dir := mdevctltest.Dir(t, map[string][]byte{
		"0000:3b:00.0/" + t4Auto:                      auto("nvidia-232"),
		"0000:3b:00.0/" + t4Params:                    manual("nvidia-232"),
		vf1 + "/a1b2c3d4-0000-4000-8000-000000000001": auto("nvidia-472"),
		// Not a VF of the A100 (its VFs start at .4).
		"0000:65:00.3/a1b2c3d4-0000-4000-8000-000000000002": auto("nvidia-472"),
		"mbochs/" + mbochsDef:                               manual("mbochs-large"),
		"mtty/a1b2c3d4-0000-4000-8000-000000000003":         auto("mtty-2"),
	})
	targets := []mdevctl.Target{{Target: vgpu.GPU(t4), Label: "config.yaml:4: gpus[0]"}, {Target: vgpu.GPU(a100)}, {Target: vgpu.Parent("mbochs")}, {Target: vgpu.Parent("mtty")}}
	err := mdevctl.Check(k, dir, targets)
	if !errors.Is(err, mdevctl.ErrAutostart) {
		t.Fatalf("Check = %v, want ErrAutostart", err)
	}
	var conflicts []*mdevctl.ConflictError
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *mdevctl.ConflictError
		if !errors.As(e, &ce) {
			t.Fatalf("%v is no ConflictError", e)
		}
		conflicts = append(conflicts, ce)
	}
	if len(conflicts) != 3 {
		t.Fatalf("%d conflicts, want the T4, the A100's VF 1 and mtty:\n%v", len(conflicts), err)
	}
	if c := conflicts[0]; c.Parent != t4.String() || c.VF != -1 || !reflect.DeepEqual(c.Auto, []string{t4Auto}) {
		t.Errorf("T4: %+v", c)
	}
	lines := strings.Split(err.Error(), "\n")
	if want := "config.yaml:4: gpus[0]: mdevctl starts mdevs on 0000:3b:00.0 when it appears (start auto in " + dir + "/0000:3b:00.0: " + t4Auto + ")"; !strings.HasPrefix(lines[0], want) {
		t.Errorf("first line:\n%s\nwant it to start %s", lines[0], want)
	}
	if c := conflicts[1]; c.Parent != vf1 || c.VF != 1 || !strings.Contains(c.Error(), "0000:65:00.5 (VF 1 of 0000:65:00.0)") {
		t.Errorf("A100: %+v\n%v", c, c)
	}
	if c := conflicts[2]; c.Parent != "mtty" || c.VF != -1 {
		t.Errorf("mtty: %+v", c)
	}
	for _, l := range lines {
		if !strings.Contains(l, "vgpuctl import mdevctl --parent ") || !strings.Contains(l, "mdevctl modify -u UUID --manual") {
			t.Errorf("a line does not say how to move over: %s", l)
		}
	}

	// The A100's VFs, once enabled, are the ones checked.
	addrs, ok, err := sriov.VFAddresses(k, a100)
	if err != nil || !ok || addrs[1].String() != vf1 {
		t.Fatalf("VF 1 of the A100 is at %v (%v, %v), the test assumes %s", addrs, ok, err, vf1)
	}

	// Manual definitions, and parents not named, are no conflict.
	if err := mdevctl.Check(k, dir, []mdevctl.Target{{Target: vgpu.Parent("mbochs")}}); err != nil {
		t.Errorf("mbochs with a manual definition: %v", err)
	}
	if err := mdevctl.Check(k, "", targets); err != nil {
		t.Errorf("no mdevctl dir: %v", err)
	}
	if err := mdevctl.Check(k, filepath.Join(t.TempDir(), "none"), targets); err != nil {
		t.Errorf("mdevctl not installed: %v", err)
	}

	// A file mdevctl cannot read stops its start-parent-mdevs: whether it
	// starts mdevs there is unknown, so it is refused too.
	broken := mdevctltest.Dir(t, map[string][]byte{"mbochs/" + mbochsDef: []byte(`{"mdev_type": "mbochs-large"}`)})
	err = mdevctl.Check(k, broken, []mdevctl.Target{{Target: vgpu.Parent("mbochs")}})
	if !errors.Is(err, mdevctl.ErrAutostart) || !strings.Contains(err.Error(), "cannot read "+filepath.Join(broken, "mbochs", mbochsDef)) {
		t.Errorf("a broken definition: %v", err)
	}
}
