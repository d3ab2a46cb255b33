package alloc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// yamlString is s as one double-quoted YAML scalar, escapes and all.
func yamlString(t *testing.T, s string) string {
	t.Helper()
	out, err := yaml.Marshal(&yaml.Node{Kind: yaml.ScalarNode, Style: yaml.DoubleQuotedStyle, Value: s})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(string(out), "\n")
}

const parentCatalog = "version: v1\nmodel: mbochs sample\nmatch:\n  mdev-parent: %s\ndialect: mdev\nframebuffer-mb: 256\n" +
	"profiles:\n  - name: mbochs-64m\n    split: 4\n    mdev-type: {id: mbochs-large, name: mbochs-large}\n"

// TestParentNamesAgree: every layer that reads a virtual mdev parent's
// name (vgpu's parsers, a host config's parent, a profile's
// match.mdev-parent, the ledger's owner, the allocator) accepts the same
// names and refuses the others, naming the field and the rule.
func TestParentNamesAgree(t *testing.T) {
	// Names an admin or the kernel may give, and what each is as a target
	// (a GPU, a virtual mdev parent, or neither) by vgpu's one rule.
	parentNames := []struct {
		name string
		is   string // "gpu", "parent" or "bad"
	}{
		{"mbochs", "parent"}, {"mdpy", "parent"}, {"mtty", "parent"},
		{"matrix", "parent"},   // vfio-ap
		{"0.0.0313", "parent"}, // a vfio-ccw subchannel
		{"cciss!c0d0", "parent"}, {"_x", "parent"}, {"x-1.y_2", "parent"},
		{strings.Repeat("b", 255), "parent"},
		{"0000:03:00.0", "gpu"}, {"03:00.0", "gpu"},
		{"a:b", "bad"}, {"mbochs:0", "bad"}, {"0000:03:00", "bad"},
		{"", "bad"}, {".", "bad"}, {"..", "bad"}, {"a/b", "bad"}, {"../mbochs", "bad"},
		{"a b", "bad"}, {" mbochs", "bad"}, {"a\tb", "bad"}, {"a\x7fb", "bad"}, {"a\u00a0b", "bad"}, {"a\u200bb", "bad"},
		{strings.Repeat("b", 256), "bad"},
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mbochs.yaml"), []byte(strings.Replace(parentCatalog, "%s", "mbochs", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cat, err := profile.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range parentNames {
		q := yamlString(t, tc.name)
		short := tc.name
		if len(short) > 20 {
			short = short[:20] + "..."
		}
		t.Run(short, func(t *testing.T) {
			parent := tc.is == "parent"
			var addr pci.Address
			if tc.is == "gpu" {
				addr = pci.MustParseAddress(tc.name)
			}

			if got := vgpu.ValidParentName(tc.name); got != parent {
				t.Errorf("vgpu.ValidParentName = %v", got)
			}
			if p, err := vgpu.ParseParent(tc.name); parent != (err == nil) || parent && p != vgpu.Parent(tc.name) {
				t.Errorf("vgpu.ParseParent = %+v, %v", p, err)
			} else if err != nil && !strings.Contains(err.Error(), vgpu.ParentRule) {
				t.Errorf("vgpu.ParseParent's error does not state the rule: %v", err)
			}
			want := map[string]vgpu.Target{"gpu": vgpu.GPU(addr), "parent": vgpu.Parent(tc.name)}[tc.is]
			if got, err := vgpu.ParseTarget(tc.name); (tc.is == "bad") != (err != nil) || got != want {
				t.Errorf("vgpu.ParseTarget = %+v, %v; want %+v", got, err, want)
			}

			// A host config's parent entry.
			_, err := config.Parse("host.yaml", []byte("version: v1\ngpus:\n  - parent: "+q+"\n    profile: mbochs-64m\n"))
			switch {
			case parent && err != nil:
				t.Errorf("config: %v", err)
			case !parent && (err == nil || !strings.Contains(err.Error(), "host.yaml:3: gpus[0].parent: ") || !strings.Contains(err.Error(), vgpu.ParentRule)):
				t.Errorf("config: %v; want an error on gpus[0].parent stating the rule", err)
			}

			// A profile's match.mdev-parent, decoded and built in code.
			f, err := profile.Decode("m.yaml", []byte(strings.Replace(parentCatalog, "%s", q, 1)))
			switch {
			case parent && (err != nil || f.Model.MdevParent != tc.name):
				t.Errorf("profile.Decode: %v", err)
			case !parent && (err == nil || !strings.Contains(err.Error(), "m.yaml:4: match.mdev-parent: ") || !strings.Contains(err.Error(), vgpu.ParentRule)):
				t.Errorf("profile.Decode: %v; want an error on match.mdev-parent stating the rule", err)
			}
			built, err := profile.Decode("m.yaml", []byte(strings.Replace(parentCatalog, "%s", "mbochs", 1)))
			if err != nil {
				t.Fatal(err)
			}
			built.Model.MdevParent = tc.name
			err = built.Validate()
			switch {
			case parent && err != nil:
				t.Errorf("profile.Validate: %v", err)
			case tc.name == "": // no mdev-parent in code: a PCI model without ids
				if err == nil {
					t.Error("profile.Validate accepts a model with neither ids nor mdev-parent")
				}
			case !parent && (err == nil || !strings.Contains(err.Error(), "match.mdev-parent: ") || !strings.Contains(err.Error(), vgpu.ParentRule)):
				t.Errorf("profile.Validate: %v; want an error on match.mdev-parent stating the rule", err)
			}

			// The ledger's owner of a vGPU.
			g, p, err := ledger.ParseOwner(tc.name)
			if (tc.is == "bad") != (err != nil) || g != want.GPU || p != want.Parent {
				t.Errorf("ledger.ParseOwner = %v, %q, %v; want %+v", g, p, err, want)
			}

			// The allocator, given an mdev on it (as carve lists one).
			l, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			c := Candidate{VGPU: vgpu.VGPU{ID: "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44", GPU: tc.name, Kind: vgpu.KindMdev,
				Parent: tc.name, Profile: "mbochs-64m"}, NUMANode: -1}
			r := Request{Profile: "mbochs-64m", Count: 1, DomainUUID: uuidN(i), DomainName: "vm"}
			got, err := New(l, cat).Allocate(context.Background(), r, []Candidate{c})
			switch {
			case tc.is == "bad":
				if err == nil || !strings.Contains(err.Error(), "names its GPU") {
					t.Errorf("alloc: %v, %v; want its GPU refused", got, err)
				}
			case err != nil || len(got) != 1 || got[0].GPU != want.GPU || got[0].Parent != want.Parent || got[0].Owner() != want.String():
				t.Errorf("alloc: %+v, %v; want one allocation on %+v", got, err, want)
			}
		})
	}
}

// TestOwnerParentOnlyOfItsMdevs: a parent's name is a vGPU's owner only
// for an mdev on that parent, as carve.ParentVGPUs lists them.
func TestOwnerParentOnlyOfItsMdevs(t *testing.T) {
	for _, c := range []vgpu.VGPU{
		{GPU: "mbochs", Kind: vgpu.KindVF, Parent: "mbochs"},
		{GPU: "mbochs", Kind: vgpu.KindMdev, Parent: "mdpy"},
	} {
		if g, p, err := owner(Candidate{VGPU: c}); err == nil || !strings.Contains(err.Error(), `"mbochs" names a virtual mdev parent`) {
			t.Errorf("owner(%+v) = %v, %q, %v; want it refused", c, g, p, err)
		}
	}
	if g, p, err := owner(Candidate{VGPU: vgpu.VGPU{GPU: "mbochs", Kind: vgpu.KindMdev, Parent: "mbochs"}}); err != nil || p != "mbochs" || !g.IsZero() {
		t.Errorf("owner of an mbochs mdev = %v, %q, %v", g, p, err)
	}
}
