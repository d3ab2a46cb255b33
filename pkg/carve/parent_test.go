package carve_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

const mbochsProfiles = `version: v1
model: mbochs sample
match: {mdev-parent: mbochs}
dialect: mdev
framebuffer-mb: 256
profiles:
  - {name: mbochs-64m, split: 4, mdev-type: {id: mbochs-large, name: mbochs-large}}
  - {name: mbochs-16m, split: 16, mdev-type: {id: mbochs-medium, name: mbochs-medium}}
`

func countTypes(t *testing.T, k *simkernel.Kernel) map[string]int {
	t.Helper()
	types, err := mdev.Types(k, "mbochs")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, ty := range types {
		out[ty.ID] = len(ty.Instances)
	}
	return out
}

// A virtual mdev parent is carved by profile like a GPU's framebuffer:
// split N instances of the type, N->M by removing first, in-use refusal,
// uncarve to nothing.
// mbochsCarver is a host with the mbochs sample, and a carver on it
// through wrap (nil: the kernel itself) with mbochsProfiles in its catalog.
func mbochsCarver(t *testing.T, wrap func(*simkernel.Kernel) sysfs.FS) (*simkernel.Kernel, *carve.Carver) {
	t.Helper()
	k, err := simkernel.New(simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{{Model: simkernel.ModelMbochs}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mbochs.yaml"), []byte(mbochsProfiles), 0o644); err != nil {
		t.Fatal(err)
	}
	cat, err := profile.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var f sysfs.FS = k
	if wrap != nil {
		f = wrap(k)
	}
	return k, carve.New(f, cat, carve.NewFileDriverStore(filepath.Join(dir, "drivers.json")),
		carve.WithLocker(carve.NewLocker(filepath.Join(dir, "locks"))))
}

func TestCarveVirtualParent(t *testing.T) {
	ctx := context.Background()
	k, c := mbochsCarver(t, nil)

	res, err := c.Carve(ctx, vgpu.Parent("mbochs"), "mbochs-64m", carve.Options{})
	if err != nil {
		t.Fatalf("carve mbochs-64m: %v", err)
	}
	if got := countTypes(t, k); got["mbochs-large"] != 4 || res.Applied != 4 || res.Plan.Parent != "mbochs" {
		t.Fatalf("after mbochs-64m: %v, applied %d, plan %+v", got, res.Applied, res.Plan)
	}
	if _, ok, _ := mdev.Get(k, carve.MdevUUID("mbochs", "mbochs-large", 0)); !ok {
		t.Errorf("the first instance is not the deterministic UUID")
	}
	if res, err := c.Carve(ctx, vgpu.Parent("mbochs"), "mbochs-64m", carve.Options{}); err != nil || !res.Plan.Empty() {
		t.Errorf("carve again: %v, plan %s", err, res.Plan)
	}

	// An instance in use blocks a change that destroys it.
	u := carve.MdevUUID("mbochs", "mbochs-large", 2)
	in, _, _ := mdev.Get(k, u)
	h, err := k.Open("/dev/vfio/" + strconv.Itoa(in.IOMMUGroup))
	if err != nil {
		t.Fatalf("open %s's group: %v", u, err)
	}
	_, err = c.Carve(ctx, vgpu.Parent("mbochs"), "mbochs-16m", carve.Options{})
	var iu *carve.InUseError
	if !errors.As(err, &iu) || !errors.Is(err, carve.ErrInUse) || !strings.Contains(err.Error(), "refusing to change mbochs") ||
		!strings.Contains(err.Error(), u) {
		t.Fatalf("carve 16m with %s open: %v", u, err)
	}
	h.Close()

	if _, err := c.Carve(ctx, vgpu.Parent("mbochs"), "mbochs-16m", carve.Options{}); err != nil {
		t.Fatalf("carve mbochs-16m: %v", err)
	}
	if got := countTypes(t, k); got["mbochs-large"] != 0 || got["mbochs-medium"] != 16 {
		t.Fatalf("after mbochs-16m: %v", got)
	}
	if _, err := c.Uncarve(ctx, vgpu.Parent("mbochs"), carve.Options{}); err != nil {
		t.Fatalf("uncarve: %v", err)
	}
	if got := countTypes(t, k); got["mbochs-medium"] != 0 {
		t.Fatalf("after uncarve: %v", got)
	}

	_, err = c.Carve(ctx, vgpu.Parent("mdpy"), "mbochs-64m", carve.Options{})
	if !errors.Is(err, mdev.ErrNoParent) || !strings.Contains(err.Error(), "(mbochs)") {
		t.Errorf("an absent parent: %v", err)
	}
	_, err = c.Carve(ctx, vgpu.Parent("mbochs"), "t4-4q", carve.Options{})
	if !errors.Is(err, profile.ErrWrongGPU) {
		t.Errorf("a GPU profile on mbochs: %v", err)
	}
}

// procCountingFS counts the listings of /proc (each one a scan of every
// process's open files on a real host) and every lookup (Stat).
type procCountingFS struct {
	*simkernel.Kernel
	procScans, stats int
}

func (f *procCountingFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if name == "/proc" {
		f.procScans++
	}
	return f.Kernel.ReadDir(name)
}

func (f *procCountingFS) Stat(name string) (fs.FileInfo, error) {
	f.stats++
	return f.Kernel.Stat(name)
}

// A carve decides on one look at the host's processes however many vGPUs
// it destroys, and makes mdevs with one write each, no lookups around them.
func TestCarveParentCost(t *testing.T) {
	ctx := context.Background()
	var f *procCountingFS
	k, c := mbochsCarver(t, func(k *simkernel.Kernel) sysfs.FS { f = &procCountingFS{Kernel: k}; return f })
	if _, err := c.Carve(ctx, vgpu.Parent("mbochs"), "mbochs-16m", carve.Options{}); err != nil {
		t.Fatal(err)
	}
	if f.stats > 4 {
		t.Errorf("carving 16 mdevs made %d lookups; want the discovery's few, none per mdev", f.stats)
	}
	if _, err := c.Uncarve(ctx, vgpu.Parent("mbochs"), carve.Options{}); err != nil {
		t.Fatal(err)
	}
	if f.procScans != 1 {
		t.Errorf("uncarving 16 mdevs listed /proc %d times; want once", f.procScans)
	}
	if got := countTypes(t, k); got["mbochs-medium"] != 0 {
		t.Fatalf("after uncarve: %v", got)
	}
}
