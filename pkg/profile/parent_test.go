package profile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

const mbochsCatalog = `version: v1
model: mbochs sample
match:
  mdev-parent: mbochs
dialect: mdev
framebuffer-mb: 256
profiles:
  - name: mbochs-64m
    split: 4
    mdev-type: {id: mbochs-large, name: mbochs-large}
  - name: mbochs-16m
    split: 16
    mdev-type: {id: mbochs-medium, name: mbochs-medium}
`

func mbochsHost(t *testing.T) (*simkernel.Kernel, *profile.Catalog) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mbochs.yaml"), []byte(mbochsCatalog), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := profile.Load(dir)
	if err != nil {
		t.Fatalf("load a catalog with an mdev-parent model: %v", err)
	}
	k, err := simkernel.New(simkernel.Host{Version: simkernel.HostVersion, GPUs: []simkernel.HostGPU{
		{Model: simkernel.ModelMbochs},
		{Model: simkernel.ModelT4, Address: pci.MustParseAddress("0000:3b:00.0")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return k, c
}

func parent(t *testing.T, k *simkernel.Kernel, name string) inventory.MdevParent {
	t.Helper()
	ps, err := inventory.MdevParents(k, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no mdev parent %s in %v", name, ps)
	return inventory.MdevParent{}
}

// A virtual mdev parent (no PCI device: the kernel's mbochs sample) is a
// model matched by name, split by its mdev types like a GPU.
func TestResolveParent(t *testing.T) {
	k, c := mbochsHost(t)
	mb := parent(t, k, "mbochs")
	pl, err := c.ResolveParent("mbochs-64m", mb)
	if err != nil {
		t.Fatalf("ResolveParent: %v", err)
	}
	if pl.Parent != "mbochs" || !pl.GPU.IsZero() || pl.Dialect != inventory.DialectMdev || pl.Split != 4 ||
		pl.MdevType != "mbochs-large" || pl.MdevTypeName != "mbochs-large" || pl.FramebufferMB != 64 {
		t.Errorf("plan %+v", pl)
	}
	if ps := c.ForParent("mbochs"); len(ps) != 2 {
		t.Errorf("ForParent(mbochs) = %v", ps)
	}

	// Refusals name what would work.
	_, err = c.ResolveParent("t4-4q", mb)
	if !errors.Is(err, profile.ErrWrongGPU) || !strings.Contains(err.Error(), "is a virtual mdev parent; profiles for it: mbochs-64m, mbochs-16m") {
		t.Errorf("a T4 profile on mbochs: %v", err)
	}
	_, err = c.ResolveParent("nope", mb)
	if !errors.Is(err, profile.ErrUnknownProfile) {
		t.Errorf("unknown profile: %v", err)
	}
	gpus, err := inventory.Discover(k, nil)
	if err != nil || len(gpus) != 1 {
		t.Fatalf("Discover: %v %v", gpus, err)
	}
	_, err = c.Resolve("mbochs-64m", gpus[0])
	if !errors.Is(err, profile.ErrWrongGPU) || !strings.Contains(err.Error(), "(mdev parent mbochs)") {
		t.Errorf("an mbochs profile on a T4: %v", err)
	}
	for _, p := range c.ForGPU(gpus[0]) {
		if p.Model.MdevParent != "" {
			t.Errorf("ForGPU(T4) lists %s of mdev parent %s", p.Name, p.Model.MdevParent)
		}
	}

	// A pool already half used makes the 16:1 type a finer split than its
	// free count says no more; a type the parent lacks is refused.
	lacking := mb
	lacking.Types = nil
	_, err = c.ResolveParent("mbochs-16m", lacking)
	if !errors.Is(err, profile.ErrCannotSplit) || !strings.Contains(err.Error(), "on mdev parent mbochs") {
		t.Errorf("a parent without types: %v", err)
	}
}

func TestDecodeMdevParent(t *testing.T) {
	f, err := profile.Decode("m.yaml", []byte(mbochsCatalog))
	if err != nil {
		t.Fatal(err)
	}
	if f.Model.MdevParent != "mbochs" || f.Model.VendorID != 0 || len(f.Model.DeviceIDs) != 0 || f.Model.IDs() != "mdev parent mbochs" {
		t.Errorf("model %+v", f.Model)
	}
	out, err := profile.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	again, err := profile.Decode("m.yaml", out)
	if err != nil || again.Model.MdevParent != "mbochs" || again.Model.VendorID != 0 {
		t.Errorf("round trip:\n%s\n%+v %v", out, again, err)
	}

	for _, c := range []struct{ name, yaml, want string }{
		{"with vendor", strings.Replace(mbochsCatalog, "  mdev-parent: mbochs\n", "  mdev-parent: mbochs\n  vendor: \"10de\"\n", 1),
			"m.yaml:5: match.vendor: cannot be given with mdev-parent"},
		{"not mdev", strings.Replace(mbochsCatalog, "dialect: mdev", "dialect: sriov", 1),
			"dialect: sriov is not possible on a virtual mdev parent"},
		{"bad name", strings.Replace(mbochsCatalog, "mdev-parent: mbochs", "mdev-parent: \"a/b\"", 1),
			"match.mdev-parent: a/b is not an mdev parent name"},
		{"neither", strings.Replace(mbochsCatalog, "  mdev-parent: mbochs\n", "  {}\n", 1),
			"match.vendor: missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := profile.Decode("m.yaml", []byte(c.yaml))
			if !errors.Is(err, profile.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Decode: %v; want %q", err, c.want)
			}
		})
	}
}
