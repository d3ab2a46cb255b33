package profile

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/inventory"
)

func loadBuiltIn(t *testing.T) *Catalog {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Every built-in profile resolves on a GPU of its model, to the plan the
// carver needs.
func TestResolveEveryCatalogProfile(t *testing.T) {
	c := loadBuiltIn(t)
	type want struct {
		split    int
		fb       uint64
		numVFs   int
		vfDriver string
		mdev     string
		nvID     int
		nvName   string
	}
	sriov := func(split int, fb uint64) want {
		return want{split: split, fb: fb, numVFs: split, vfDriver: DriverVFIO}
	}
	mdev := func(split int, fb uint64, t string) want { return want{split: split, fb: fb, mdev: t} }
	a100 := func(split int, fb uint64, t string) want {
		return want{split: split, fb: fb, numVFs: split, vfDriver: DriverNVIDIA, mdev: t}
	}
	l40s := func(split int, fb uint64, id int, name string) want {
		return want{split: split, fb: fb, numVFs: split, vfDriver: DriverNVIDIA, nvID: id, nvName: name}
	}
	type resolveCase struct {
		profile string
		gpu     func() inventory.GPU
		want    want
	}
	cases := []resolveCase{
		{"s7150-8g", s7150GPU, sriov(1, 8192)},
		{"s7150-4g", s7150GPU, sriov(2, 4096)},
		{"s7150-2g", s7150GPU, sriov(4, 2048)},
		{"s7150-2g-liquid", s7150GPU, sriov(4, 2048)},
		{"s7150-1g", s7150GPU, sriov(8, 1024)},
		{"s7150-512m", s7150GPU, sriov(16, 512)},
		{"mi25-16g", mi25GPU, sriov(1, 16384)},
		{"mi25-8g", mi25GPU, sriov(2, 8192)},
		{"mi25-4g", mi25GPU, sriov(4, 4096)},
		{"mi25-2g", mi25GPU, sriov(8, 2048)},
		{"mi25-1g", mi25GPU, sriov(16, 1024)},
		{"t4-16q", t4GPU, mdev(1, 16384, "nvidia-234")},
		{"t4-8q", t4GPU, mdev(2, 8192, "nvidia-233")},
		{"t4-4q", t4GPU, mdev(4, 4096, "nvidia-232")},
		{"t4-4q-equal", t4GPU, mdev(4, 4096, "nvidia-232")},
		{"t4-2q", t4GPU, mdev(8, 2048, "nvidia-231")},
		{"t4-1q", t4GPU, mdev(16, 1024, "nvidia-230")},
		{"a100-40c", a100GPU, a100(1, 40960, "nvidia-473")},
		{"a100-20c", a100GPU, a100(2, 20480, "nvidia-472")},
		{"a100-10c", a100GPU, a100(4, 10240, "nvidia-471")},
		{"a100-5c", a100GPU, a100(8, 5120, "nvidia-469")},
		// MIG-backed: each vGPU has its instance's framebuffer.
		{"a100-1-5c", a100GPU, l40s(7, 5120, 474, "NVIDIA A100-1-5C")},
		{"a100-2-10c", a100GPU, l40s(3, 10240, 475, "NVIDIA A100-2-10C")},
		{"a100-3-20c", a100GPU, l40s(2, 20480, 476, "NVIDIA A100-3-20C")},
		{"a100-7-40c", a100GPU, l40s(1, 40960, 478, "NVIDIA A100-7-40C")},
		// Time-sliced on a vGPU 17+ host: a type per VF.
		{"a100-vf-40c", a100VFGPU, l40s(1, 40960, 473, "NVIDIA A100-40C")},
		{"a100-vf-20c", a100VFGPU, l40s(2, 20480, 472, "NVIDIA A100-20C")},
		{"a100-vf-10c", a100VFGPU, l40s(4, 10240, 471, "NVIDIA A100-10C")},
		{"a100-vf-5c", a100VFGPU, l40s(8, 5120, 469, "NVIDIA A100-5C")},
		{"rtx6000ada-48q", rtx6000AdaGPU, l40s(1, 49152, 950, "NVIDIA RTX6000-Ada-48Q")},
		{"rtx6000ada-24q", rtx6000AdaGPU, l40s(2, 24576, 949, "NVIDIA RTX6000-Ada-24Q")},
		{"rtx6000ada-12q", rtx6000AdaGPU, l40s(4, 12288, 947, "NVIDIA RTX6000-Ada-12Q")},
		{"rtx6000ada-6q", rtx6000AdaGPU, l40s(8, 6144, 945, "NVIDIA RTX6000-Ada-6Q")},
		{"rtx6000ada-3q", rtx6000AdaGPU, l40s(16, 3072, 943, "NVIDIA RTX6000-Ada-3Q")},
		{"l40s-48q", l40sGPU, l40s(1, 49152, 1156, "NVIDIA L40S-48Q")},
		{"l40s-24q", l40sGPU, l40s(2, 24576, 1155, "NVIDIA L40S-24Q")},
		{"l40s-12q", l40sGPU, l40s(4, 12288, 1153, "NVIDIA L40S-12Q")},
		{"l40s-12q-fixed", l40sGPU, l40s(4, 12288, 1153, "NVIDIA L40S-12Q")},
		{"l40s-12q-mixed", l40sGPU, l40s(4, 12288, 1153, "NVIDIA L40S-12Q")},
		{"l40s-6q", l40sGPU, l40s(8, 6144, 1151, "NVIDIA L40S-6Q")},
		{"l40s-3q", l40sGPU, l40s(16, 3072, 1149, "NVIDIA L40S-3Q")},
		{"gvtg-1", gvtgGPU, mdev(1, 0, "i915-GVTg_V5_1")},
		{"gvtg-2", gvtgGPU, mdev(2, 0, "i915-GVTg_V5_2")},
		{"gvtg-4", gvtgGPU, mdev(4, 0, "i915-GVTg_V5_4")},
		{"gvtg-7", gvtgGPU, mdev(7, 0, "i915-GVTg_V5_8")},
		{"rtx3090-full", rtx3090GPU, want{split: 1, fb: 24576}},
		// Built in: any GPU, whole; the framebuffer where the GPU states it.
		{"passthrough", h200GPU, want{split: 1}},
		{"mi300x-192g", mi300xGPU, sriov(1, 196608)},
		{"mi300x-24g", mi300xGPU, sriov(8, 24576)},
		{"mi350x-288g", mi350xGPU, sriov(1, 294912)},
		{"mi350x-144g", mi350xGPU, sriov(2, 147456)},
		{"mi350x-36g", mi350xGPU, sriov(8, 36864)},
		{"v710-28g", v710GPU, sriov(1, 28672)},
		{"v710-14g", v710GPU, sriov(2, 14336)},
		{"v710-9557m", v710GPU, sriov(3, 9557)},
		{"v710-7g", v710GPU, sriov(4, 7168)},
		{"v710-4778m", v710GPU, sriov(6, 4778)},
		{"v710-3584m", v710GPU, sriov(8, 3584)},
		{"v710-2389m", v710GPU, sriov(12, 2389)},
		{"b50-16g", b50GPU, sriov(1, 16384)},
		{"b50-8g", b50GPU, sriov(2, 8192)},
		{"b50-4g", b50GPU, sriov(4, 4096)},
		{"b50-4g-pinned", b50GPU, sriov(4, 3456)},
		{"b50-4g-sliced", b50GPU, sriov(4, 4096)},
		{"b50-2g", b50GPU, sriov(8, 2048)},
		{"b60-24g", b60GPU, sriov(1, 24576)},
		{"b60-12g", b60GPU, sriov(2, 12288)},
		{"b60-6g", b60GPU, sriov(4, 6144)},
		{"b60-6g-pinned", b60GPU, sriov(4, 5504)},
		{"b60-6g-sliced", b60GPU, sriov(4, 6144)},
		{"b60-3g", b60GPU, sriov(8, 3072)},
	}
	// The vGPU 17+ boards' types, most given by name only: the plan takes
	// the id and name the VFs list, the type whose name ends in the table's.
	for prefix, b := range vfBoards() {
		for _, p := range c.Profiles() {
			if !strings.HasPrefix(p.Name, prefix+"-") {
				continue
			}
			if p.GPUInstance != nil {
				// MIG-backed, by name only: no VF lists the type before
				// its instances exist, NVML's supported types name it.
				id := p.NVIDIA.ID
				if id == 0 {
					id = 8000 + len(cases)
				}
				gpu := func() inventory.GPU {
					g := b.gpu()
					g.NVIDIATypes = append(slices.Clone(b.types), inventory.VGPUType{ID: id, Name: p.NVIDIA.Name})
					return g
				}
				cases = append(cases, resolveCase{p.Name, gpu, l40s(p.Split, p.GPUInstance.MemoryMB(), id, p.NVIDIA.Name)})
				continue
			}
			table := strings.TrimPrefix(p.NVIDIA.Name, "NVIDIA ")
			i := slices.IndexFunc(b.types, func(x inventory.VGPUType) bool { return strings.HasSuffix(x.Name, " "+table) })
			if i < 0 {
				t.Fatalf("the %s fixture lists no %s", prefix, table)
			}
			hw := b.types[i]
			cases = append(cases, resolveCase{p.Name, b.gpu, l40s(p.Split, b.fbMB/uint64(p.Split), hw.ID, hw.Name)})
		}
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		covered[tc.profile] = true
		t.Run(tc.profile, func(t *testing.T) {
			p, ok := c.Get(tc.profile)
			if !ok {
				t.Fatalf("%s is not in the catalog", tc.profile)
			}
			g := tc.gpu()
			pl, err := c.Resolve(tc.profile, g)
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			got := want{pl.Split, pl.FramebufferMB, pl.NumVFs, pl.VFDriver, pl.MdevType, pl.NVIDIATypeID, pl.NVIDIATypeName}
			if got != w {
				t.Errorf("plan = %+v\nwant   %+v", got, w)
			}
			if pl.Profile != tc.profile || pl.GPU != g.Address || pl.Dialect != p.Model.Dialect {
				t.Errorf("plan names %s on %s (%s)", pl.Profile, pl.GPU, pl.Dialect)
			}
			if pl.MdevType != "" && pl.MdevTypeName != p.Mdev.Name {
				t.Errorf("MdevTypeName = %q, want %q", pl.MdevTypeName, p.Mdev.Name)
			}
			// The same split asked for by ratio gives the same plan (a
			// scheduler is asked for by name).
			if byRatio, err := c.ResolveSplit(p.Split, g); p.GIM == nil && p.Xe == nil && p.Scheduler == nil && !p.MixedSize && !p.Builtin() && (err != nil || !reflect.DeepEqual(byRatio, pl)) && !migShadowed(c, p) {
				t.Errorf("ResolveSplit(%d) = %+v, %v", p.Split, byRatio, err)
			}
			if !containsProfile(c.Usable(g), tc.profile) {
				t.Errorf("Usable does not list %s", tc.profile)
			}
		})
	}
	for _, p := range c.Profiles() {
		if !covered[p.Name] {
			t.Errorf("catalog profile %s has no case here: add one with a GPU of its model", p.Name)
		}
	}
}

// Once the A100's VFs are on, their types are checked; the L40S's likewise.
func TestResolveWithVFsEnabled(t *testing.T) {
	c := loadBuiltIn(t)
	pl, err := c.Resolve("a100-10c", a100GPUWithVFs(20))
	if err != nil {
		t.Fatal(err)
	}
	if pl.MdevType != "nvidia-471" || pl.NumVFs != 4 || pl.FramebufferMB != 10240 {
		t.Errorf("plan = %+v", pl)
	}
	pl, err = c.Resolve("l40s-24q", l40sGPUWithVFs(4))
	if err != nil {
		t.Fatal(err)
	}
	if pl.NVIDIATypeID != 1155 || pl.NumVFs != 2 {
		t.Errorf("plan = %+v", pl)
	}
}

// Types are found by name first: a driver (or the fake kernel) that
// numbers them differently still resolves, to its own id; NVIDIA's rebrand
// of GRID to NVIDIA is the same name.
func TestResolveFindsTypesByName(t *testing.T) {
	c := loadBuiltIn(t)
	g := t4GPU()
	g.MdevTypes = []inventory.MdevType{nvType(222, "GRID T4-1Q", 1024, 16), nvType(224, "GRID T4-4Q", 4096, 4), nvType(232, "GRID T4-4A", 4096, 4)}
	pl, err := c.Resolve("t4-4q", g)
	if err != nil {
		t.Fatal(err)
	}
	if pl.MdevType != "nvidia-224" {
		t.Errorf("MdevType = %s, want the hardware's nvidia-224", pl.MdevType)
	}

	a := a100GPUWithVFs(2)
	for i := range a.SRIOV.VFs {
		for j := range a.SRIOV.VFs[i].MdevTypes {
			mt := &a.SRIOV.VFs[i].MdevTypes[j]
			mt.Name = strings.Replace(mt.Name, "NVIDIA ", "GRID ", 1)
		}
	}
	pl, err = c.Resolve("a100-40c", a)
	if err != nil {
		t.Fatal(err)
	}
	if pl.MdevType != "nvidia-473" || pl.MdevTypeName != "GRID A100-40C" {
		t.Errorf("plan = %+v", pl)
	}

	// Kernel >= 6.1 without a pretty name shows the id: trust the id.
	v := gvtgGPU()
	for i := range v.MdevTypes {
		v.MdevTypes[i].Name = v.MdevTypes[i].ID
	}
	if pl, err := c.Resolve("gvtg-4", v); err != nil || pl.MdevType != "i915-GVTg_V5_4" || pl.MdevTypeName != "GVTg_V5_4" {
		t.Errorf("Resolve = %+v, %v", pl, err)
	}
}

func TestResolveRefusals(t *testing.T) {
	c := loadBuiltIn(t)
	cases := []struct {
		name    string
		profile string
		gpu     func() inventory.GPU
		kind    error
		want    []string
	}{
		{"unknown profile", "mi25-3g", mi25GPU, ErrUnknownProfile,
			[]string{`unknown profile "mi25-3g"`, "profiles for it: mi25-16g, mi25-8g, mi25-4g, mi25-2g, mi25-1g"}},
		{"unknown profile, unknown GPU", "x", func() inventory.GPU {
			return gpu("0000:05:00.0", 0x1af4, 0x1050, "Red Hat, Inc.", "Virtio GPU", "virtio-pci", 0)
		}, ErrUnknownProfile, []string{`unknown profile "x"`, "no profile in the catalog fits it"}},
		{"wrong GPU", "t4-4q", mi25GPU, ErrWrongGPU,
			[]string{"profile t4-4q is for NVIDIA Tesla T4 (10de:1eb8); 0000:03:00.0 is Advanced Micro Devices, Inc. [AMD/ATI] Vega 10 [Radeon Instinct MI25] (1002:6860); profiles for it: mi25-16g, mi25-8g, mi25-4g, mi25-2g, mi25-1g"}},
		{"wrong GPU without names", "mi25-4g", func() inventory.GPU {
			g := t4GPU()
			g.VendorName, g.DeviceName = "", ""
			return g
		}, ErrWrongGPU, []string{"0000:3b:00.0 is 10de:1eb8; profiles for it: t4-16q"}},
		{"too few VFs", "mi25-1g", func() inventory.GPU {
			g := mi25GPU()
			g.SRIOV.TotalVFs = 8
			return g
		}, ErrCannotSplit, []string{"AMD Radeon Instinct MI25 cannot be split 16:1 on 0000:03:00.0: sriov_totalvfs is 8; it can be split 1, 2, 4, 8 (profiles mi25-16g, mi25-8g, mi25-4g, mi25-2g); it can be passed through whole (profile passthrough)"}},
		{"no SR-IOV", "s7150-2g", func() inventory.GPU {
			g := s7150GPU()
			g.SRIOV = nil
			return g
		}, ErrCannotSplit, []string{"cannot be split 4:1", "no SR-IOV capability: SR-IOV off in firmware", "no profile of it fits right now; it can be passed through whole (profile passthrough)"}},
		{"no SR-IOV in a guest, not the vGPU host driver, no IOMMU", "h200x-141c", func() inventory.GPU {
			g := h200GPU()
			g.IOMMUGroup, g.Guest = -1, "its PCI host bridge 0000:00:00.0 is QEMU's"
			g.NVIDIADriver = &inventory.NVIDIADriver{Version: "580.159.04"}
			return g
		}, ErrCannotSplit, []string{"NVIDIA H200 SXM 141GB cannot be split 1:1 on 0000:00:06.0: no SR-IOV capability: this OS is a guest (its PCI host bridge 0000:00:00.0 is QEMU's)",
			"; NVIDIA datacenter driver 580.159.04, not the vGPU host driver", "; no profile of it fits right now"}},
		{"passthrough without an IOMMU", "passthrough", func() inventory.GPU {
			g := h200GPU()
			g.IOMMUGroup = -1
			return g
		}, ErrCannotSplit, []string{"NVIDIA Corporation GH100 [H200 SXM 141GB] (10de:2335) cannot be passed through on 0000:00:06.0: no IOMMU group: enable the IOMMU (intel_iommu=on or amd_iommu=on on the kernel command line; in a VM, a vIOMMU)"}},
		{"no IOMMU", "rtx3090-full", func() inventory.GPU {
			g := rtx3090GPU()
			g.IOMMUGroup = -1
			return g
		}, ErrCannotSplit, []string{"NVIDIA GeForce RTX 3090 cannot be split 1:1", "no IOMMU group", "intel_iommu=on"}},
		{"no mdev types", "t4-4q", func() inventory.GPU {
			g := t4GPU()
			g.MdevTypes = nil
			return g
		}, ErrCannotSplit, []string{"NVIDIA Tesla T4 cannot be split 4:1 on 0000:3b:00.0: it offers no mdev types", "no profile of it fits right now"}},
		{"T4 under the datacenter driver", "t4-4q", func() inventory.GPU {
			g := t4GPU()
			g.MdevTypes, g.NVIDIADriver = nil, &inventory.NVIDIADriver{Version: "580.159.04"}
			return g
		}, ErrCannotSplit, []string{"NVIDIA Tesla T4 cannot be split 4:1 on 0000:3b:00.0: NVIDIA datacenter driver 580.159.04, not the vGPU host driver (its module nvidia_vgpu_vfio is not loaded)"}},
		{"type not offered", "t4-8q", func() inventory.GPU {
			g := t4GPU()
			g.MdevTypes = g.MdevTypes[:4]
			return g
		}, ErrCannotSplit, []string{"does not offer mdev type nvidia-233 (GRID T4-8Q); it offers nvidia-222 (GRID T4-1B), nvidia-230", "it can be split 4, 8, 16 (profiles t4-4q, t4-4q-equal, t4-2q, t4-1q)"}},
		{"max instances differ", "t4-4q", func() inventory.GPU {
			g := t4GPU()
			g.MdevTypes[3].MaxInstances = 3
			return g
		}, ErrCannotSplit, []string{"its mdev type nvidia-232 makes 3 instances, not 4"}},
		{"type renamed", "t4-4q", func() inventory.GPU {
			g := t4GPU()
			g.MdevTypes = []inventory.MdevType{nvType(232, "GRID T4-4A", 4096, 4)}
			return g
		}, ErrCannotSplit, []string{`its mdev type nvidia-232 is "GRID T4-4A", the catalog expects "GRID T4-4Q"`}},
		{"GVT-g without room (256 MB aperture)", "gvtg-4", func() inventory.GPU {
			g := gvtgGPU()
			g.MdevTypes = g.MdevTypes[:2]
			g.MdevTypes[0].AvailableInstances, g.MdevTypes[1].AvailableInstances = 2, 1
			return g
		}, ErrCannotSplit, []string{"its mdev type i915-GVTg_V5_4 has room for 1 instances, not 4", "a larger aperture"}},
		{"A100 VF type max_instance", "a100-10c", func() inventory.GPU {
			g := a100GPUWithVFs(1)
			g.SRIOV.VFs[0].MdevTypes[3].MaxInstances = 5
			return g
		}, ErrCannotSplit, []string{"nvidia-471 makes 5 instances, not 4"}},
		{"A100 VFs without the type", "a100-10c", func() inventory.GPU {
			g := a100GPUWithVFs(1)
			g.SRIOV.VFs[0].MdevTypes = g.SRIOV.VFs[0].MdevTypes[:1]
			return g
		}, ErrCannotSplit, []string{"does not offer mdev type nvidia-471 (NVIDIA A100-10C)"}},
		{"A100 too few VFs", "a100-5c", func() inventory.GPU {
			g := a100GPU()
			g.SRIOV.TotalVFs = 4
			return g
		}, ErrCannotSplit, []string{"cannot be split 8:1", "sriov_totalvfs is 4", "it can be split 1, 2, 4"}},
		{"L40S type not creatable on idle VFs", "l40s-3q", func() inventory.GPU {
			g := l40sGPUWithVFs(2)
			for _, vf := range g.SRIOV.VFs {
				vf.NVIDIA.Creatable = vf.NVIDIA.Creatable[5:]
			}
			return g
		}, ErrCannotSplit, []string{"its VFs do not offer vGPU type 1149 (NVIDIA L40S-3Q)"}},
		{"L40S type renamed", "l40s-12q", func() inventory.GPU {
			g := l40sGPUWithVFs(1)
			g.SRIOV.VFs[0].NVIDIA.Creatable = []inventory.VGPUType{{ID: 1153, Name: "NVIDIA L40S-12A"}}
			return g
		}, ErrCannotSplit, []string{`its vGPU type 1153 is "NVIDIA L40S-12A"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := c.Resolve(tc.profile, tc.gpu())
			if err == nil {
				t.Fatalf("Resolve succeeded: %+v", pl)
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("error is not %v: %v", tc.kind, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%s", w, err)
				}
			}
		})
	}
}

// A busy L40S lists only what still fits, so its lists cannot refuse.
func TestResolveTrustsCatalogOnBusyL40S(t *testing.T) {
	c := loadBuiltIn(t)
	g := l40sGPUWithVFs(4)
	for _, vf := range g.SRIOV.VFs {
		vf.NVIDIA.Creatable = []inventory.VGPUType{{ID: 1153, Name: "NVIDIA L40S-12Q"}}
	}
	g.SRIOV.VFs[0].NVIDIA.CurrentType = 1153
	if _, err := c.Resolve("l40s-24q", g); err != nil {
		t.Errorf("Resolve: %v", err)
	}
}

func TestResolveSplitRefusals(t *testing.T) {
	c := loadBuiltIn(t)
	_, err := c.ResolveSplit(3, mi25GPU())
	if !errors.Is(err, ErrCannotSplit) || err.Error() != "AMD Radeon Instinct MI25 cannot be split 3:1; it can be split 1, 2, 4, 8, 16 (profiles mi25-16g, mi25-8g, mi25-4g, mi25-2g, mi25-1g); it can be passed through whole (profile passthrough)" {
		t.Errorf("ResolveSplit(3) = %v", err)
	}
	_, err = c.ResolveSplit(16, a100GPU())
	if !errors.Is(err, ErrCannotSplit) || !strings.Contains(err.Error(), "cannot be split 16:1; it can be split 1, 2, 4, 8") {
		t.Errorf("ResolveSplit(16) on A100 = %v", err)
	}
	// Without a profile of its own a GPU is passed through whole, or not at all.
	_, err = c.ResolveSplit(2, gpu("0000:05:00.0", 0x1af4, 0x1050, "", "", "", 0))
	if !errors.Is(err, ErrCannotSplit) || err.Error() != "1af4:1050 cannot be split 2:1; no profile of it fits right now; it can be passed through whole (profile passthrough)" {
		t.Errorf("ResolveSplit on an unknown GPU = %v", err)
	}
}

func containsProfile(ps []Profile, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

// migShadowed: a MIG-backed profile whose split a time-sliced profile of
// the same GPU also makes is asked for by name; by ratio gives the other.
func migShadowed(c *Catalog, p Profile) bool {
	if p.GPUInstance == nil {
		return false
	}
	for _, o := range c.Profiles() {
		if o.GPUInstance == nil && o.Split == p.Split && o.Model.Matches(p.Model.VendorID, p.Model.DeviceIDs[0]) {
			return true
		}
	}
	return false
}

// TestXeVRAMQuotaAndVFIODriver: a pinned quota is the model's VRAM less
// what the PF keeps, split evenly in 2 MiB granules; a migratable xe
// model's VFs go to xe-vfio-pci where it is loaded, to vfio-pci otherwise.
func TestXeVRAMQuotaAndVFIODriver(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.Get("b50-4g-pinned")
	if got, want := p.XeVRAMQuota(), uint64(16384-XePFReserveMB)/4<<20; got != want || got%(2<<20) != 0 {
		t.Fatalf("b50-4g-pinned quota = %d, want %d", got, want)
	}
	if p, _ := c.Get("b50-4g"); p.XeVRAMQuota() != 0 {
		t.Fatal("b50-4g pins VRAM")
	}
	x := Profile{Spec: Spec{Split: 3, Xe: &XeOptions{VRAMQuota: XeVRAMPinned}}, Model: Model{FramebufferMB: 16384}}
	if got := x.XeVRAMQuota() >> 20; got != 4608 { // 13824/3, even
		t.Fatalf("3-way pinned share = %d MiB", got)
	}
	x.Xe.VRAMQuota = "3GiB"
	if got := x.XeVRAMQuota(); got != 3<<30 {
		t.Fatalf("3GiB = %d", got)
	}
	g := b50GPU()
	pl, err := c.Resolve("b50-4g-pinned", g)
	if err != nil || pl.VFDriver != DriverVFIO || pl.XeVRAMQuota != p.XeVRAMQuota() {
		t.Fatalf("without xe-vfio-pci: %+v, %v", pl, err)
	}
	g.Xe = &inventory.XeAdmin{VFIODriver: "xe-vfio-pci"}
	pl, err = c.Resolve("b50-4g", g)
	if err != nil || pl.VFDriver != "xe-vfio-pci" {
		t.Fatalf("with xe-vfio-pci: %+v, %v", pl, err)
	}
	// A model without migration keeps vfio-pci.
	mi := mi25GPU()
	mi.Xe = &inventory.XeAdmin{VFIODriver: "xe-vfio-pci"}
	if pl, err := c.Resolve("mi25-4g", mi); err != nil || pl.VFDriver != DriverVFIO {
		t.Fatalf("mi25: %+v, %v", pl, err)
	}
}

// Groups: one per catalog file and the built-in, what fits, and when
// nothing does, why.
func TestGroups(t *testing.T) {
	c := loadBuiltIn(t)
	g := h200GPU()
	g.IOMMUGroup, g.Guest = -1, "QEMU"
	g.NVIDIADriver = &inventory.NVIDIADriver{Version: "580.159.04"}
	gs := c.Groups(g)
	var files []string
	for _, gr := range gs {
		files = append(files, gr.File)
		if len(gr.Fit) != 0 || gr.WhyNot == "" {
			t.Errorf("%s: fit %v, why %q; want nothing and a reason", gr.File, gr.Fit, gr.WhyNot)
		}
	}
	if want := []string{"profiles/nvidia-h200-sxm.yaml", "profiles/nvidia-h200-sxm-mig.yaml", BuiltinFile}; !slices.Equal(files, want) {
		t.Errorf("groups %v, want %v", files, want)
	}
	if last := gs[len(gs)-1]; last.WhyNot != inventory.ReasonNoIOMMU || !slices.Equal(last.Profiles, []string{Passthrough}) {
		t.Errorf("built-in: %+v", last)
	}
	for _, gr := range c.Groups(t4GPU()) {
		if len(gr.Fit) == 0 || gr.WhyNot != "" {
			t.Errorf("T4 %s: fit %v, why %q", gr.File, gr.Fit, gr.WhyNot)
		}
	}
}
