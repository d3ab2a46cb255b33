package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/nvvf"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Profiles of the built-in T4 and L40S types that set NVIDIA's plugin
// parameters.
const paramsCatalog = `version: v1
model: NVIDIA Tesla T4
match: {vendor: 10de, devices: [1eb8]}
dialect: mdev
framebuffer-mb: 16384
profiles:
  - name: t4-4q-nofrl
    split: 4
    mdev-type: {id: nvidia-232, name: GRID T4-4Q}
    vgpu-params: {frame_rate_limiter: 0, disable_vnc: 1}
`

const paramsCatalogL40S = `version: v1
model: NVIDIA L40S
match: {vendor: 10de, devices: [26b9]}
dialect: nvidia-vf
framebuffer-mb: 49152
profiles:
  - name: l40s-12q-uvm
    split: 4
    nvidia-type: {id: 1153, name: NVIDIA L40S-12Q}
    vgpu-params: {enable_uvm: 1}
`

// A prepare writes the profile's vgpu_params into each vGPU before its VM
// starts: into the mdev swapped in with the domain's UUID, and into a VF;
// a VF handed to a profile without params has earlier ones cleared.
func TestPrepareWritesVGPUParams(t *testing.T) {
	dir := t.TempDir()
	for name, doc := range map[string]string{"t4.yaml": paramsCatalog, "l40s.yaml": paramsCatalogL40S} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := "version: v1\ngpus:\n  - address: \"0000:3b:00.0\"\n    profile: t4-4q-nofrl\n  - all: true\n    profile: l40s-12q-uvm\n"
	r := start(t, simkernel.NewExample(t, "mixed.yaml"), cfg, dir)
	read := func(p string) string {
		t.Helper()
		b, err := r.k.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}

	if _, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "t4-4q-nofrl", VGPUs: []string{mdevA0}}); err != nil {
		t.Fatal(err)
	}
	if got := read(nvvf.ParamsFile(sysfs.MdevDevices + "/" + mdevA0)); got != "frame_rate_limiter=0, disable_vnc=1" {
		t.Errorf("the mdev's vgpu_params = %q", got)
	}

	res, err := r.c.Reserve(bg, domB, api.ReserveRequest{Name: "gpu01", Profile: "l40s-12q-uvm", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	vf := res.Allocations[0].VGPU
	params := nvvf.ParamsFile(pci.DevicePath(pci.MustParseAddress(vf)))
	if err := r.k.WriteFile(params, []byte("frame_rate_limiter=1")); err != nil { // left by someone else
		t.Fatal(err)
	}
	if _, err := r.c.Prepare(bg, domB, api.PrepareRequest{Name: "gpu01", Profile: "l40s-12q-uvm", VGPUs: []string{vf}}); err != nil {
		t.Fatal(err)
	}
	if got := read(params); got != "enable_uvm=1" {
		t.Errorf("the VF's vgpu_params = %q, want the profile's", got)
	}
}
