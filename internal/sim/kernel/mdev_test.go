package simkernel

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/pci/pcitest"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

const (
	uuid1 = "8f1c6f2a-1b6e-4c3e-9a57-2f0d4f6c1a01"
	uuid2 = "8f1c6f2a-1b6e-4c3e-9a57-2f0d4f6c1a02"
	uuid3 = "8f1c6f2a-1b6e-4c3e-9a57-2f0d4f6c1a03"
)

const (
	mttyTypesDir   = "/sys/class/mdev_bus/mtty/mdev_supported_types"
	mbochsTypesDir = "/sys/class/mdev_bus/mbochs/mdev_supported_types"
)

func avail(t *testing.T, k *Kernel, typeDir string) string {
	t.Helper()
	return strings.TrimSpace(read(t, k, typeDir+"/available_instances"))
}

func TestSampleParentsLayout(t *testing.T) {
	k := newHost(t, ModelMbochs, "", ModelMtty, "")
	tests := []struct {
		typeDir, name, desc, avail string
	}{
		{mbochsTypesDir + "/mbochs-small", "mbochs-small\n", "virtual display, 4 MB video memory\n", "64"},
		{mbochsTypesDir + "/mbochs-medium", "mbochs-medium\n", "virtual display, 16 MB video memory\n", "16"},
		{mbochsTypesDir + "/mbochs-large", "mbochs-large\n", "virtual display, 64 MB video memory\n", "4"},
		{mttyTypesDir + "/mtty-1", "Single port serial\n", "", "24"},
		{mttyTypesDir + "/mtty-2", "Dual port serial\n", "", "12"},
	}
	for _, tt := range tests {
		if got := read(t, k, tt.typeDir+"/name"); got != tt.name {
			t.Errorf("%s name = %q, want %q", tt.typeDir, got, tt.name)
		}
		if tt.desc == "" {
			wantExists(t, k, tt.typeDir+"/description", false)
		} else if got := read(t, k, tt.typeDir+"/description"); got != tt.desc {
			t.Errorf("%s description = %q", tt.typeDir, got)
		}
		if got := read(t, k, tt.typeDir+"/device_api"); got != "vfio-pci\n" {
			t.Errorf("device_api = %q", got)
		}
		if got := avail(t, k, tt.typeDir); got != tt.avail {
			t.Errorf("%s available = %s, want %s", tt.typeDir, got, tt.avail)
		}
		fi, err := k.Stat(tt.typeDir + "/create")
		if err != nil || fi.Mode() != 0o200 {
			t.Errorf("create mode %v %v", fi, err)
		}
	}
	if got, _ := k.Readlink("/sys/class/mdev_bus/mbochs"); got != "../../devices/virtual/mbochs/mbochs" {
		t.Errorf("mdev_bus link = %q", got)
	}
	wantExists(t, k, "/sys/bus/mdev/drivers/mbochs/unbind", true)
	wantExists(t, k, "/sys/bus/mdev/drivers/mtty/bind", true)
}

func TestMdevCreateErrors(t *testing.T) {
	create := mttyTypesDir + "/mtty-1/create"
	tests := []struct {
		name  string
		setup func(t *testing.T, k *Kernel)
		path  string
		value string
		errno syscall.Errno
	}{
		{"ok", nil, create, uuid1, 0},
		{"ok with newline", nil, create, uuid1 + "\n", 0},
		{"upper case", nil, create, strings.ToUpper(uuid1), 0},
		{"not a uuid", nil, create, "not-a-uuid", syscall.EINVAL},
		{"uuid without hyphens", nil, create, strings.ReplaceAll(uuid1, "-", "") + "abcd", syscall.EINVAL},
		{"uuid with bad hex", nil, create, "zf1c6f2a-1b6e-4c3e-9a57-2f0d4f6c1a01", syscall.EINVAL},
		{"too long", nil, create, uuid1 + "\n\n", syscall.EINVAL},
		{"exists", func(t *testing.T, k *Kernel) { write(t, k, create, uuid1) }, create, uuid1, syscall.EEXIST},
		{"exists on another parent", func(t *testing.T, k *Kernel) {
			write(t, k, mbochsTypesDir+"/mbochs-small/create", uuid1)
		}, create, uuid1, syscall.EEXIST},
		{"exists, other case", func(t *testing.T, k *Kernel) { write(t, k, create, uuid1) }, create, strings.ToUpper(uuid1), syscall.EEXIST},
		{"no room", func(t *testing.T, k *Kernel) {
			for i := 0; i < 4; i++ {
				write(t, k, mbochsTypesDir+"/mbochs-large/create", fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
			}
		}, mbochsTypesDir + "/mbochs-small/create", uuid1, syscall.ENOSPC},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newHost(t, ModelMtty, "", ModelMbochs, "")
			if tt.setup != nil {
				tt.setup(t, k)
			}
			writeErr(t, k, tt.path, tt.value, tt.errno)
			if tt.errno == 0 {
				wantExists(t, k, "/sys/bus/mdev/devices/"+uuid1, true)
			}
		})
	}
}

func TestMdevInstanceLayoutAndRemove(t *testing.T) {
	k := newHost(t, ModelMtty, "")
	write(t, k, mttyTypesDir+"/mtty-2/create", uuid1)
	inst := "/sys/bus/mdev/devices/" + uuid1
	if got, _ := k.Readlink(inst); got != "../../../devices/virtual/mtty/mtty/"+uuid1 {
		t.Errorf("bus link = %q", got)
	}
	if got, _ := k.Readlink(inst + "/mdev_type"); got != "../mdev_supported_types/mtty-2" {
		t.Errorf("mdev_type = %q", got)
	}
	if got, _ := k.Readlink(mttyTypesDir + "/mtty-2/devices/" + uuid1); got != "../../../"+uuid1 {
		t.Errorf("type devices link = %q", got)
	}
	if got := linkBase(t, k, inst+"/driver"); got != MdevDrvMtty {
		t.Errorf("driver = %q", got)
	}
	if got := read(t, k, inst+"/vendor/sample_mdev_dev"); got != "This is MDEV "+uuid1+"\n" {
		t.Errorf("vendor attr = %q", got)
	}
	if got := read(t, k, inst+"/uevent"); got != "DRIVER=mtty\nMDEV_TYPE=2\n" {
		t.Errorf("uevent = %q", got)
	}
	g := groupOf(t, k, inst)
	wantExists(t, k, "/sys/kernel/iommu_groups/"+g+"/devices/"+uuid1, true)
	wantExists(t, k, "/dev/vfio/"+g, true)
	fi, err := k.Stat(inst + "/remove")
	if err != nil || fi.Mode() != 0o200 {
		t.Fatalf("remove mode %v %v", fi, err)
	}

	// A shared pool: one dual port took two singles.
	if got := avail(t, k, mttyTypesDir+"/mtty-1"); got != "22" {
		t.Errorf("mtty-1 available = %s, want 22", got)
	}
	if got := avail(t, k, mttyTypesDir+"/mtty-2"); got != "11" {
		t.Errorf("mtty-2 available = %s, want 11", got)
	}

	writeErr(t, k, inst+"/remove", "yes", syscall.EINVAL)
	write(t, k, inst+"/remove", "0") // kstrtoul ok, zero: nothing
	wantExists(t, k, inst, true)
	write(t, k, inst+"/remove", "1")
	for _, p := range []string{inst, "/sys/devices/virtual/mtty/mtty/" + uuid1, mttyTypesDir + "/mtty-2/devices/" + uuid1,
		"/sys/kernel/iommu_groups/" + g, "/dev/vfio/" + g, "/sys/bus/mdev/drivers/mtty/" + uuid1} {
		wantExists(t, k, p, false)
	}
	if got := avail(t, k, mttyTypesDir+"/mtty-1"); got != "24" {
		t.Errorf("mtty-1 available after remove = %s", got)
	}
}

func TestMdevRemoveBlocksWhileOpen(t *testing.T) {
	k := newHost(t, ModelMbochs, "")
	write(t, k, mbochsTypesDir+"/mbochs-small/create", uuid1)
	node := "/dev/vfio/" + groupOf(t, k, "/sys/bus/mdev/devices/"+uuid1)
	h := openDevice(t, k, node)
	done := pcitest.Async(func() error { return k.WriteFile("/sys/bus/mdev/devices/"+uuid1+"/remove", []byte("1")) })
	pcitest.StillBlocked(t, "mdev remove", done)
	wantExists(t, k, "/sys/bus/mdev/devices/"+uuid1, true)
	// A second remove also waits and then succeeds.
	again := pcitest.Async(func() error { return k.WriteFile(mbochsTypesDir+"/mbochs-small/devices/"+uuid1+"/remove", []byte("1")) })
	pcitest.StillBlocked(t, "second mdev remove", again)
	h.Close()
	pcitest.Released(t, "mdev remove", done)
	pcitest.Released(t, "second mdev remove", again)
	wantExists(t, k, "/sys/bus/mdev/devices/"+uuid1, false)
	wantExists(t, k, node, false)
}

func TestMdevUnbindFromDriver(t *testing.T) {
	k := newHost(t, ModelMtty, "")
	write(t, k, mttyTypesDir+"/mtty-1/create", uuid1)
	node := "/dev/vfio/" + groupOf(t, k, "/sys/bus/mdev/devices/"+uuid1)
	writeErr(t, k, "/sys/bus/mdev/drivers/mtty/unbind", uuid2, syscall.ENODEV)
	write(t, k, "/sys/bus/mdev/drivers/mtty/unbind", uuid1)
	wantExists(t, k, node, false)
	wantExists(t, k, "/sys/bus/mdev/devices/"+uuid1+"/driver", false)
	writeErr(t, k, "/sys/bus/mdev/drivers/mtty/bind", uuid1, syscall.ENODEV)
	write(t, k, "/sys/bus/mdev/devices/"+uuid1+"/remove", "1")
	wantExists(t, k, "/sys/bus/mdev/devices/"+uuid1, false)
}

// docs/lab.md, "The differential test": 4/16/64 MB from 256 MB; 64/16/4 free -> after one 64 MB 48/12/3.
func TestMbochsPool(t *testing.T) {
	k := newHost(t, ModelMbochs, "")
	write(t, k, mbochsTypesDir+"/mbochs-large/create", uuid1)
	for typ, want := range map[string]string{"mbochs-small": "48", "mbochs-medium": "12", "mbochs-large": "3"} {
		if got := avail(t, k, mbochsTypesDir+"/"+typ); got != want {
			t.Errorf("%s available = %s, want %s", typ, got, want)
		}
	}
	if got := read(t, k, "/sys/bus/mdev/devices/"+uuid1+"/vendor/memory"); got != "64 MB\n" {
		t.Errorf("vendor/memory = %q", got)
	}
}

// i915 makes a GVT-g iGPU an mdev parent only with enable_gvt and kvmgt
// (intel_gvt.c): a stock host (enable_gvt N, no kvmgt) has none, nor
// enable_gvt alone; modprobe kvmgt then registers it, as
// intel_gvt_set_ops initialises the GPUs i915 already drives.
func TestGVTgNeedsEnableGVTAndKVMGT(t *testing.T) {
	parent := "/sys/class/mdev_bus/" + gvtgAddr
	k := newHost(t, ModelGVTg, gvtgAddr)
	wantExists(t, k, parent, false)
	if got := read(t, k, "/sys/module/i915/parameters/enable_gvt"); got != "N\n" {
		t.Fatalf("enable_gvt = %q", got)
	}
	wantExists(t, k, "/sys/module/kvmgt", false)
	if out, code := k.modprobe([]string{"kvmgt"}); code != 0 {
		t.Fatalf("modprobe kvmgt: %d %s", code, out)
	}
	wantExists(t, k, parent, false) // enable_gvt is still N
	wantExists(t, k, "/sys/bus/mdev/drivers/"+MdevDrvGVTg, true)

	k = NewFor(t, Host{I915EnableGVT: true, GPUs: []HostGPU{{Model: ModelGVTg}}})
	wantExists(t, k, parent, false)
	wantExists(t, k, "/sys/bus/mdev/drivers/"+MdevDrvGVTg, false)
	if out, code := k.modprobe([]string{"kvmgt"}); code != 0 {
		t.Fatalf("modprobe kvmgt: %d %s", code, out)
	}
	wantExists(t, k, parent, true)
	wantExists(t, k, "/sys/module/kvmgt", true)
	if got := avail(t, k, devPath(gvtgAddr, "mdev_supported_types/i915-GVTg_V5_4")); got != "5" {
		t.Fatalf("_4 available after modprobe kvmgt = %s", got)
	}
}

// GVT-g's room, as intel_gvt_init_vgpu_types and intel_vgpu_get_available
// compute it: with a 1024 MB aperture the guests get 896 MB of low GM,
// 4096-1024-384 = 2688 MB of high GM and 32-4 = 28 fences.
func TestGVTgPool(t *testing.T) {
	k := NewFor(t, Host{I915EnableGVT: true, KVMGT: true, GPUs: []HostGPU{{Model: ModelGVTg}}})
	types := devPath(gvtgAddr, "mdev_supported_types")
	wantAvail := func(when string, want map[string]string) {
		t.Helper()
		for typ, w := range want {
			if got := avail(t, k, types+"/"+typ); got != w {
				t.Errorf("%s: %s available = %s, want %s", when, typ, got, w)
			}
		}
	}
	// _8: min(896/64, 2688/384, 28/4) = 7: never the 8 its name says.
	wantAvail("idle", map[string]string{"i915-GVTg_V5_8": "7", "i915-GVTg_V5_4": "5", "i915-GVTg_V5_2": "2", "i915-GVTg_V5_1": "1"})
	if got := read(t, k, types+"/i915-GVTg_V5_8/name"); got != "GVTg_V5_8\n" {
		t.Errorf("name = %q (no pretty name: falls back to the sysfs name)", got)
	}
	if got := read(t, k, types+"/i915-GVTg_V5_8/description"); got != "low_gm_size: 64MB\nhigh_gm_size: 384MB\nfence: 4\nresolution: 1024x768\nweight: 2\n" {
		t.Errorf("description = %q", got)
	}
	write(t, k, types+"/i915-GVTg_V5_4/create", uuid1)
	// left: low 768, high 2176, fences 24
	wantAvail("after one _4", map[string]string{"i915-GVTg_V5_8": "5", "i915-GVTg_V5_4": "4", "i915-GVTg_V5_2": "2", "i915-GVTg_V5_1": "1"})
	write(t, k, types+"/i915-GVTg_V5_1/create", uuid2)
	// left: low 256, high 128: no more _1
	writeErr(t, k, types+"/i915-GVTg_V5_1/create", uuid3, syscall.ENOSPC)
	if got := linkBase(t, k, "/sys/bus/mdev/devices/"+uuid1+"/driver"); got != MdevDrvGVTg {
		t.Errorf("driver = %q", got)
	}
	// Unbinding i915 takes the parent and its instances away.
	write(t, k, "/sys/bus/pci/drivers/i915/unbind", gvtgAddr)
	wantExists(t, k, types, false)
	wantExists(t, k, "/sys/class/mdev_bus/"+gvtgAddr, false)
	wantExists(t, k, "/sys/bus/mdev/devices/"+uuid1, false)
	write(t, k, "/sys/bus/pci/drivers/i915/bind", gvtgAddr)
	if got := avail(t, k, types+"/i915-GVTg_V5_1"); got != "1" {
		t.Errorf("after rebind _1 available = %s", got)
	}
}

// A smaller aperture registers only the types whose low GM fits, and fewer
// of them: with 256 MB, _8 and _4 (2 and 1), no _2 or _1.
func TestGVTgAperture(t *testing.T) {
	k := NewFor(t, Host{I915EnableGVT: true, KVMGT: true, GPUs: []HostGPU{{Model: ModelGVTg, ApertureMB: 256}}})
	types := devPath(gvtgAddr, "mdev_supported_types")
	for typ, w := range map[string]string{"i915-GVTg_V5_8": "2", "i915-GVTg_V5_4": "1"} {
		if got := avail(t, k, types+"/"+typ); got != w {
			t.Errorf("%s available = %s, want %s", typ, got, w)
		}
	}
	wantExists(t, k, types+"/i915-GVTg_V5_2", false)
	wantExists(t, k, types+"/i915-GVTg_V5_1", false)
	if _, err := New(Host{GPUs: []HostGPU{{Model: ModelGVTg, ApertureMB: 300}}}); err == nil || !strings.Contains(err.Error(), "gpus[0].apertureMB: 300") {
		t.Fatalf("aperture 300: %v", err)
	}
	if _, err := New(Host{GPUs: []HostGPU{{Model: ModelT4, Address: pci.MustParseAddress(t4Addr), ApertureMB: 256}}}); err == nil {
		t.Fatal("an aperture on a T4 was accepted")
	}
}

func TestT4Homogeneous(t *testing.T) {
	k := newHost(t, ModelT4, t4Addr)
	types := "/sys/class/mdev_bus/" + t4Addr + "/mdev_supported_types"
	if got := read(t, k, types+"/nvidia-232/name"); got != "GRID T4-4Q\n" {
		t.Fatalf("nvidia-232 name = %q", got)
	}
	if got := read(t, k, types+"/nvidia-232/description"); got != "num_heads=4, frl_config=60, framebuffer=4096M, max_resolution=7680x4320, max_instance=4\n" {
		t.Fatalf("description = %q", got)
	}
	for typ, w := range map[string]string{"nvidia-230": "16", "nvidia-231": "8", "nvidia-232": "4", "nvidia-233": "2", "nvidia-234": "1", "nvidia-319": "4"} {
		if got := avail(t, k, types+"/"+typ); got != w {
			t.Errorf("idle %s available = %s, want %s", typ, got, w)
		}
	}
	write(t, k, types+"/nvidia-232/create", uuid1)
	if got := avail(t, k, types+"/nvidia-232"); got != "3" {
		t.Errorf("4Q available after one = %s", got)
	}
	for _, other := range []string{"nvidia-230", "nvidia-234", "nvidia-319", "nvidia-222"} {
		if got := avail(t, k, types+"/"+other); got != "0" {
			t.Errorf("%s available = %s while 4Q is in use, want 0", other, got)
		}
	}
	writeErr(t, k, types+"/nvidia-230/create", uuid2, syscall.ENOSPC)
	if got := linkBase(t, k, "/sys/bus/mdev/devices/"+uuid1+"/driver"); got != MdevDrvNVIDIA {
		t.Errorf("driver = %q", got)
	}
	for _, u := range []string{uuid2, uuid3, "8f1c6f2a-1b6e-4c3e-9a57-2f0d4f6c1a04"} {
		write(t, k, types+"/nvidia-232/create", u)
	}
	writeErr(t, k, types+"/nvidia-232/create", "8f1c6f2a-1b6e-4c3e-9a57-2f0d4f6c1a05", syscall.ENOSPC)
	for _, u := range []string{uuid1, uuid2, uuid3, "8f1c6f2a-1b6e-4c3e-9a57-2f0d4f6c1a04"} {
		write(t, k, "/sys/bus/mdev/devices/"+u+"/remove", "1")
	}
	if got := avail(t, k, types+"/nvidia-230"); got != "16" {
		t.Errorf("1Q after all removed = %s", got)
	}
}

func TestA100PerVFMdev(t *testing.T) {
	k := newHost(t, ModelA100, a100Addr)
	wantExists(t, k, "/sys/class/mdev_bus/"+a100Addr, false) // the PF is not a parent
	sriovManage(t, k, "-e", a100Addr)
	vfTypes := func(i int) string {
		vf, _ := vfAddress(k.devs[a100Addr].addr, k.devs[a100Addr].sriov.def, i)
		return "/sys/class/mdev_bus/" + vf.String() + "/mdev_supported_types"
	}
	if got := read(t, k, vfTypes(0)+"/nvidia-468/name"); got != "NVIDIA A100-4C\n" {
		t.Fatalf("nvidia-468 name = %q", got)
	}
	if got := avail(t, k, vfTypes(0)+"/nvidia-472"); got != "1" {
		t.Fatalf("20C on an idle VF = %s", got)
	}
	// 20C fits twice on the GPU: VF0 and VF1, not VF2.
	write(t, k, vfTypes(0)+"/nvidia-472/create", uuid1)
	if got := avail(t, k, vfTypes(0)+"/nvidia-472"); got != "0" {
		t.Errorf("VF0 holds one already: %s", got)
	}
	if got := avail(t, k, vfTypes(1)+"/nvidia-468"); got != "0" {
		t.Errorf("another type on VF1 while 20C is in use: %s", got)
	}
	write(t, k, vfTypes(1)+"/nvidia-472/create", uuid2)
	if got := avail(t, k, vfTypes(2)+"/nvidia-472"); got != "0" {
		t.Errorf("a third 20C: %s", got)
	}
	writeErr(t, k, vfTypes(2)+"/nvidia-472/create", uuid3, syscall.ENOSPC)
	writeErr(t, k, vfTypes(0)+"/nvidia-472/create", uuid3, syscall.ENOSPC)
	g := groupOf(t, k, "/sys/bus/mdev/devices/"+uuid1)
	wantExists(t, k, "/dev/vfio/"+g, true)
	vf0 := linkBase(t, k, devPath(a100Addr, "virtfn0"))
	if d := driverOf(k, vf0); d != DrvNVIDIA {
		t.Errorf("VF0 driver = %q, want nvidia", d)
	}

	// Disabling the VFs blocks while an mdev on a VF is open.
	h := openDevice(t, k, "/dev/vfio/"+g)
	pcitest.BlocksUntilReleased(t, "sriov-manage -d with an open mdev on a VF", h, tool(k, sysfs.ToolSriovManage, "-d", a100Addr))
	wantExists(t, k, "/sys/bus/mdev/devices/"+uuid1, false)
	wantExists(t, k, "/sys/bus/mdev/devices/"+uuid2, false)
	sriovManage(t, k, "-e", a100Addr)
	if got := avail(t, k, vfTypes(3)+"/nvidia-473"); got != "1" {
		t.Errorf("pool not released: 40C available = %s", got)
	}
}
