package profiles_test

import (
	"io/fs"
	"os"
	"slices"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/profiles"
)

// The embedded catalog is exactly the *.yaml files of this directory (what
// `make install` copies), and every one of them is valid.
func TestEmbeddedCatalog(t *testing.T) {
	onDisk, err := fs.Glob(os.DirFS("."), "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := fs.Glob(profiles.FS, "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(embedded) == 0 || !slices.Equal(onDisk, embedded) {
		t.Fatalf("embedded %v, on disk %v", embedded, onDisk)
	}
	for _, name := range embedded {
		data, err := fs.ReadFile(profiles.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := profile.Decode(name, data)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if err := f.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	c, err := profile.LoadCatalog(profiles.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Profiles()) == 0 {
		t.Fatal("empty catalog")
	}
}
