package importer_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/importer"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/mdevctl/mdevctltest"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// The fixtures' UUIDs (pkg/mdevctl/testdata/README.md).
const (
	t4Auto    = "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44"
	t4Params  = "0b6f3c1e-2d4a-4e5b-8c7d-9e0f1a2b3c4d"
	mbochsDef = "2f1e0d9c-8b7a-4c6d-9e5f-4a3b2c1d0e9f"
	gvtgAuto  = "5269fe7a-18d1-48ad-88e1-3fda4176f536"
	gvtgAttrs = "c07ab7b2-8aa2-427a-91c6-ffc949bb77f9"
	apManual  = "783e6dbb-ea0e-411f-94e2-717eaad438bf"
)

// A host with a T4 (mdevs on the PF), an A100 under vGPU 16 (an mdev per
// VF; first VF at .4), Intel GVT-g and the mbochs sample.
var (
	t4   = pci.MustParseAddress("0000:3b:00.0")
	a100 = pci.MustParseAddress("0000:65:00.0")
)

func newHost(t *testing.T, more ...simkernel.HostGPU) *simkernel.Kernel {
	t.Helper()
	gpus := append([]simkernel.HostGPU{{Model: "t4", Address: t4}, {Model: "a100", Address: a100},
		{Model: "gvtg", Address: pci.MustParseAddress("0000:00:02.0")}, {Model: "mbochs"}}, more...)
	k, err := simkernel.New(simkernel.Host{Version: "v1", NVIDIADriver: "535.230.02", GPUs: gpus})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// catalog is the built-in one, the lab's (mbochs) and a T4 profile that
// sets vgpu_params.
func catalog(t *testing.T) *profile.Catalog {
	t.Helper()
	c, err := profile.Load("testdata/profiles", filepath.Join("..", "..", "e2e", "lab", "profiles"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func def(typ, start string) []byte {
	return []byte(`{"mdev_type": "` + typ + `", "start": "` + start + `", "attrs": []}`)
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(got) {
		t.Errorf("output differs from %s (go test ./pkg/importer -update rewrites it)\n--- want\n%s\n--- got\n%s", p, want, got)
	}
}

// TestMdevctl imports a host's worth of definitions: the ones that map
// become entries, with what becomes of each UUID, and every one that does
// not is named on its own line.
func TestMdevctl(t *testing.T) {
	k := newHost(t)
	// One of the T4's definitions runs now, as mdevctl start left it.
	if err := mdev.Create(k, t4.String(), "nvidia-232", t4Auto); err != nil {
		t.Fatal(err)
	}
	dir := mdevctltest.Dir(t, map[string][]byte{
		// T4: two of GRID T4-4Q, one running.
		"0000:3b:00.0/" + t4Auto:                            mdevctltest.Fixture(t, "debian-define/"+t4Auto),
		"0000:3b:00.0/a1b2c3d4-0000-4000-8000-00000000000a": def("nvidia-232", "manual"),
		// A100: one mdev on each of VFs 0 and 1, which do not exist yet.
		"0000:65:00.4/a1b2c3d4-0000-4000-8000-000000000001": def("nvidia-472", "auto"),
		"0000:65:00.5/a1b2c3d4-0000-4000-8000-000000000002": def("nvidia-472", "auto"),
		// GVT-g: mdevctl's own test data, with attrs no profile sets.
		"0000:00:02.0/" + gvtgAttrs: mdevctltest.Fixture(t, "mdevctl-load-json/"+gvtgAttrs+".in"),
		// mbochs: the lab's profile.
		"mbochs/" + mbochsDef: mdevctltest.Fixture(t, "debian-define/"+mbochsDef),
		// An s390 AP queue, on a parent this host lacks.
		"0001:00:03.1/" + apManual: mdevctltest.Fixture(t, "mdevctl-load-json/"+apManual+".in"),
	})
	r, err := importer.Mdevctl(importer.MdevctlInput{FS: k, Dir: dir, Catalog: catalog(t)})
	if err != nil {
		t.Fatal(err)
	}
	// Every definition's UUID is pinned; the A100's in VF order.
	want := []config.Entry{
		{Address: t4, Profile: "t4-4q", MdevUUIDs: []string{t4Auto, "a1b2c3d4-0000-4000-8000-00000000000a"}},
		{Address: a100, Profile: "a100-20c", MdevUUIDs: []string{"a1b2c3d4-0000-4000-8000-000000000001", "a1b2c3d4-0000-4000-8000-000000000002"}},
		{Parent: "mbochs", Profile: "lab-mbochs-64m", MdevUUIDs: []string{mbochsDef}},
	}
	if len(r.Entries) != len(want) {
		t.Fatalf("entries %+v, want %+v", r.Entries, want)
	}
	for i, e := range r.Entries {
		if !reflect.DeepEqual(e.Entry, want[i]) {
			t.Errorf("entry %d: %+v, want %+v", i, e.Entry, want[i])
		}
	}
	if len(r.Skipped) != 2 || !strings.HasPrefix(r.Skipped[0], "0000:00:02.0 (Intel Gen9 graphics (GVT-g)): attrs vgpud does not set: example-attribute=attribute-value") ||
		!strings.HasPrefix(r.Skipped[1], "0001:00:03.1: not on this host (mdevctl definitions "+apManual+")") {
		t.Errorf("skipped:\n%s", strings.Join(r.Skipped, "\n"))
	}
	y, err := r.YAML()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "mdevctl", []byte(strings.ReplaceAll(string(y), dir, "DIR")))
	cfg, err := config.Parse("imported", y)
	if err != nil || len(cfg.GPUs) != 3 {
		t.Fatalf("the import is not a config: %v", err)
	}
	for _, c := range []string{"mdevctl modify -u " + t4Auto + " -p 0000:3b:00.0 --manual",
		"mdevctl modify -u a1b2c3d4-0000-4000-8000-000000000002 -p 0000:65:00.5 --manual"} {
		if !strings.Contains(strings.Join(r.Commands, "\n"), c) {
			t.Errorf("commands lack %q:\n%s", c, strings.Join(r.Commands, "\n"))
		}
	}
	if len(r.Commands) != 3 {
		t.Errorf("commands: %v; want one per auto definition taken over", r.Commands)
	}
}

// TestMdevctlNotMapped: each way definitions cannot map is named, and the
// parent left out of the config, never guessed.
func TestMdevctlNotMapped(t *testing.T) {
	params := []byte(`{"mdev_type": "nvidia-232", "start": "auto", "attrs": [{"nvidia/vgpu_params": "frame_rate_limiter=0"}]}`)
	for _, c := range []struct {
		name  string
		files map[string][]byte
		want  string
		entry *config.Entry
	}{
		{"mixed types", map[string][]byte{"0000:3b:00.0/" + t4Auto: def("nvidia-232", "auto"), "0000:3b:00.0/" + t4Params: def("nvidia-231", "auto")},
			"0000:3b:00.0 (NVIDIA Tesla T4): mixed mdev types, nvidia-231 (1: " + t4Params + "), nvidia-232 (1: " + t4Auto + "); a vgpud profile is one type in equal parts", nil},
		{"a type no profile has", map[string][]byte{"0000:3b:00.0/" + t4Auto: def("nvidia-999", "auto")},
			"0000:3b:00.0 (NVIDIA Tesla T4): no catalog profile has mdev type nvidia-999 (definitions " + t4Auto + "); profiles of mdev there: t4-16q, t4-8q, t4-4q", nil},
		{"more than the split", fiveT4(), "5 definitions of nvidia-232 (GRID T4-4Q), and its profile t4-4q makes 4; vgpud cannot make them all", nil},
		{"attrs differ", map[string][]byte{"0000:3b:00.0/" + t4Auto: def("nvidia-232", "auto"), "0000:3b:00.0/" + t4Params: mdevctltest.Fixture(t, "debian-define/"+t4Params)},
			"set different attrs", nil},
		{"vgpu_params no profile sets", map[string][]byte{"0000:3b:00.0/" + t4Params: []byte(`{"mdev_type": "nvidia-232", "start": "auto", "attrs": [{"nvidia/vgpu_params": "enable_uvm=1"}]}`)},
			"no catalog profile has mdev type nvidia-232 (GRID T4-4Q) (definitions " + t4Params + "); profiles of mdev there with those vgpu_params", nil},
		{"vgpu_params a profile sets", map[string][]byte{"0000:3b:00.0/" + t4Params: params}, "", &config.Entry{Address: t4, Profile: "t4-4q-nofrl", MdevUUIDs: []string{t4Params}}},
		{"vgpu_params garbled", map[string][]byte{"0000:3b:00.0/" + t4Params: []byte(`{"mdev_type": "nvidia-232", "start": "auto", "attrs": [{"nvidia/vgpu_params": "frl=off"}]}`)},
			`nvidia/vgpu_params "frl=off": frl=off is not a vgpu-params setting`, nil},
		{"on the GPU and its VFs", map[string][]byte{"0000:65:00.0/" + t4Auto: def("nvidia-472", "auto"), "0000:65:00.4/" + t4Params: def("nvidia-472", "auto")},
			"both on the GPU and on its VFs", nil},
		{"two on one VF", map[string][]byte{"0000:65:00.4/" + t4Auto: def("nvidia-472", "auto"), "0000:65:00.4/" + t4Params: def("nvidia-472", "auto")},
			"2 definitions on VF 0", nil},
		{"on a VF the profile leaves empty", map[string][]byte{"0000:65:00.6/" + t4Auto: def("nvidia-472", "auto")},
			"definition " + t4Auto + " is on VF 2, and profile a100-20c puts its 2 mdevs on VFs 0 to 1", nil},
		{"unreadable", map[string][]byte{"mbochs/" + mbochsDef: []byte(`{"mdev_type": "mbochs-large"}`)},
			"mbochs: mdevctl cannot read", nil},
		{"a parent not here", map[string][]byte{"0000:99:00.0/" + t4Auto: def("nvidia-232", "auto")},
			"0000:99:00.0: not on this host", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := importer.Mdevctl(importer.MdevctlInput{FS: newHost(t), Dir: mdevctltest.Dir(t, c.files), Catalog: catalog(t)})
			if err != nil {
				t.Fatal(err)
			}
			if c.entry != nil {
				if len(r.Entries) != 1 || !reflect.DeepEqual(r.Entries[0].Entry, *c.entry) || len(r.Skipped) != 0 {
					t.Fatalf("entries %+v, skipped %v; want %+v", r.Entries, r.Skipped, *c.entry)
				}
				return
			}
			if len(r.Entries) != 0 || len(r.Skipped) != 1 || !strings.Contains(r.Skipped[0], c.want) {
				t.Fatalf("entries %+v, skipped:\n%s\nwant one line with %q", r.Entries, strings.Join(r.Skipped, "\n"), c.want)
			}
		})
	}
}

// A definition's UUID is pinned where it fits; one that another entry
// pins already, or whose mdev runs on a parent outside the entry's GPU, is
// left out of mdev-uuids with a comment saying why, and the entry still
// imported.
func TestMdevctlPinsWhereTheyFit(t *testing.T) {
	k := newHost(t)
	// pinB runs on mbochs, yet the T4 defines it too.
	const pinB, pinC = "a1b2c3d4-0000-4000-8000-00000000000b", "a1b2c3d4-0000-4000-8000-00000000000c"
	if err := mdev.Create(k, "mbochs", "mbochs-large", pinB); err != nil {
		t.Fatal(err)
	}
	dir := mdevctltest.Dir(t, map[string][]byte{
		"0000:3b:00.0/" + t4Auto: def("nvidia-232", "auto"),
		"0000:3b:00.0/" + pinB:   def("nvidia-232", "manual"),
		// The same UUID defined on mbochs and the T4, and another on both
		// of the A100's VFs.
		"mbochs/" + t4Auto:     def("mbochs-large", "manual"),
		"0000:65:00.4/" + pinC: def("nvidia-472", "manual"),
		"0000:65:00.5/" + pinC: def("nvidia-472", "manual"),
	})
	r, err := importer.Mdevctl(importer.MdevctlInput{FS: k, Dir: dir, Catalog: catalog(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Entries) != 3 || !reflect.DeepEqual(r.Entries[0].MdevUUIDs, []string{t4Auto}) || !reflect.DeepEqual(r.Entries[1].MdevUUIDs, []string{pinC}) ||
		r.Entries[2].Parent != "mbochs" || r.Entries[2].MdevUUIDs != nil {
		t.Fatalf("entries %+v", r.Entries)
	}
	comments := strings.Join(slices.Concat(r.Entries[0].Comment, r.Entries[1].Comment, r.Entries[2].Comment), "\n")
	for _, want := range []string{
		pinB + " (0000:3b:00.0, start manual): not pinned: an mdev of it runs on mbochs (type mbochs-large), and vgpud moves no mdev between parents",
		t4Auto + " (mbochs, start manual): not pinned: the entry of address 0000:3b:00.0 pins it already",
		pinC + " (0000:65:00.5, VF 1, start manual): not pinned again: mdevctl defines it on another VF of this GPU too",
	} {
		if !strings.Contains(comments, want) {
			t.Errorf("comments lack %q:\n%s", want, comments)
		}
	}
	y, err := r.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse("imported", y); err != nil {
		t.Fatalf("the import is not a config: %v\n%s", err, y)
	}
}

func fiveT4() map[string][]byte {
	out := map[string][]byte{}
	for _, u := range []string{"1", "2", "3", "4", "5"} {
		out["0000:3b:00.0/a1b2c3d4-0000-4000-8000-00000000000"+u] = def("nvidia-232", "auto")
	}
	return out
}

// TestMdevctlParent: --parent takes one GPU with its VFs, given by its own
// address or a VF's, or a virtual parent; one without definitions is an
// error naming those there are.
func TestMdevctlParent(t *testing.T) {
	k := newHost(t)
	dir := mdevctltest.Dir(t, map[string][]byte{
		"0000:3b:00.0/" + t4Auto:                            def("nvidia-232", "auto"),
		"0000:65:00.5/a1b2c3d4-0000-4000-8000-000000000002": def("nvidia-472", "auto"),
		"mbochs/" + mbochsDef:                               def("mbochs-large", "manual"),
	})
	for parent, want := range map[string]string{"0000:65:00.5": "0000:65:00.0", "65:00.0": "0000:65:00.0", "mbochs": "mbochs", "0000:3b:00.0": "0000:3b:00.0"} {
		r, err := importer.Mdevctl(importer.MdevctlInput{FS: k, Dir: dir, Catalog: catalog(t), Parent: parent})
		if err != nil || len(r.Entries) != 1 || len(r.Skipped) != 0 {
			t.Fatalf("--parent %s: %+v, %v", parent, r, err)
		}
		if got := r.Entries[0].Address.String(); r.Entries[0].Parent != want && got != want {
			t.Errorf("--parent %s: %+v, want %s", parent, r.Entries[0].Entry, want)
		}
	}
	_, err := importer.Mdevctl(importer.MdevctlInput{FS: k, Dir: dir, Catalog: catalog(t), Parent: "0000:86:00.0"})
	if !errors.Is(err, importer.ErrNoDefinitions) || !strings.Contains(err.Error(), "it has definitions for: 0000:3b:00.0, 0000:65:00.0, mbochs") {
		t.Errorf("--parent without definitions: %v", err)
	}
}
