package inventory_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

const hostsDir = "../../examples/hosts/"

// names loads the system pci.ids, which the project setup script installs.
func names(t *testing.T) *inventory.Names {
	t.Helper()
	if _, err := os.Stat(inventory.DebianPCIIDs); err != nil {
		t.Fatalf("%s is missing (%v): run the project setup script or apt-get install pci.ids", inventory.DebianPCIIDs, err)
	}
	n, err := inventory.LoadNames("")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func discoverOne(t *testing.T, f sysfs.FS, n *inventory.Names) inventory.GPU {
	t.Helper()
	gpus, err := inventory.Discover(f, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 1 {
		t.Fatalf("Discover found %d GPUs, want 1: %+v", len(gpus), gpus)
	}
	return gpus[0]
}

// withVFs enables the VFs of g, an NVIDIA GPU (sriov-manage -e enables
// all of them), and discovers it again.
func withVFs(t *testing.T, f sysfs.FS, g inventory.GPU) inventory.GPU {
	t.Helper()
	if err := sysfstest.EnableVFs(f, g.Address.String(), 0); err != nil {
		t.Fatal(err)
	}
	return discoverOne(t, f, nil)
}

// checkCommon asserts what every GPU must carry, against the kernel's own
// links rather than the model's tables.
func checkCommon(t *testing.T, f sysfs.FS, g inventory.GPU) {
	t.Helper()
	wantGroup, ok, err := pci.IOMMUGroup(f, g.Address)
	if err != nil || !ok || g.IOMMUGroup != wantGroup {
		t.Errorf("%s: group %d, kernel says %d (%v, %v)", g.Address, g.IOMMUGroup, wantGroup, ok, err)
	}
	if drv, _ := pci.CurrentDriver(f, g.Address); g.Driver != drv {
		t.Errorf("%s: driver %q, kernel says %q", g.Address, g.Driver, drv)
	}
	if d := g.Dialects; len(d) == 0 || d[len(d)-1] != inventory.DialectPassthrough {
		t.Errorf("%s: dialects %v do not end with passthrough", g.Address, d)
	}
	if g.SRIOV != nil {
		for _, vf := range g.SRIOV.VFs {
			grp, _, _ := pci.IOMMUGroup(f, vf.Address)
			drv, _ := pci.CurrentDriver(f, vf.Address)
			if vf.IOMMUGroup != grp || vf.Driver != drv || grp == g.IOMMUGroup {
				t.Errorf("VF %s: group %d driver %q; kernel says %d %q", vf.Address, vf.IOMMUGroup, vf.Driver, grp, drv)
			}
		}
		if len(g.SRIOV.VFs) != g.SRIOV.NumVFs {
			t.Errorf("%s: %d VFs listed, numvfs %d", g.Address, len(g.SRIOV.VFs), g.SRIOV.NumVFs)
		}
	}
}

func dialects(d ...inventory.Dialect) []inventory.Dialect {
	return append(d, inventory.DialectPassthrough)
}

func TestDiscoverAMD(t *testing.T) {
	n := names(t)
	for _, c := range []struct {
		model, addr, device, driver string
		id, vfID                    uint16
		class                       uint32
		bootVFs                     int // old GIM enables every VF when it loads
		gim                         *inventory.GIMState
	}{
		{"s7150", "0000:3d:00.0", "Tonga XT GL [FirePro S7150]", "", 0x6929, 0x692f, 0x030000, 16, &inventory.GIMState{}},
		{"mi25", "0000:03:00.0", "Vega 10 [Instinct MI25/MI25x2/V340/V320]", "sriov-standin", 0x6860, 0x686c, 0x038000, 0, nil},
	} {
		k := simkernel.NewExample(t, c.model+".yaml")
		g := discoverOne(t, k, n)
		checkCommon(t, k, g)
		if len(g.SRIOV.VFs) != c.bootVFs {
			t.Fatalf("%s: %d VFs at boot, want %d", c.model, len(g.SRIOV.VFs), c.bootVFs)
		}
		want := inventory.GPU{
			Address: pci.MustParseAddress(c.addr), VendorID: 0x1002, DeviceID: c.id,
			VendorName: "Advanced Micro Devices, Inc. [AMD/ATI]", DeviceName: c.device,
			Class: c.class, NUMANode: 0, IOMMUGroup: g.IOMMUGroup, Driver: c.driver,
			Dialects: dialects(inventory.DialectSRIOV),
			SRIOV:    &inventory.SRIOV{TotalVFs: 16, NumVFs: c.bootVFs, VFDeviceID: c.vfID, VFs: g.SRIOV.VFs},
			GIM:      c.gim,
		}
		if !reflect.DeepEqual(g, want) {
			t.Errorf("%s:\n got %+v %+v\nwant %+v %+v", c.model, g, g.SRIOV, want, want.SRIOV)
		}

		// VFs appear with their own drivers and groups.
		nvfs := c.bootVFs
		if nvfs == 0 {
			nvfs = 4
			if err := sriov.SetNumVFs(k, g.Address, 4); err != nil {
				t.Fatal(err)
			}
		}
		vfs, _ := sriov.VFs(k, g.Address)
		if err := pci.Bind(context.Background(), k, vfs[2].Address, "vfio-pci"); err != nil {
			t.Fatal(err)
		}
		g = discoverOne(t, k, n)
		checkCommon(t, k, g)
		if g.SRIOV.NumVFs != nvfs || len(g.SRIOV.VFs) != nvfs || g.SRIOV.VFs[2].Driver != "vfio-pci" || g.SRIOV.VFs[0].Driver != "pci-stub" {
			t.Errorf("%s with VFs: %+v", c.model, g.SRIOV)
		}
		for i, vf := range g.SRIOV.VFs {
			if vf.Index != i || vf.NVIDIA != nil || vf.MdevTypes != nil {
				t.Errorf("%s VF %d = %+v", c.model, i, vf)
			}
		}
		if !reflect.DeepEqual(g.Dialects, dialects(inventory.DialectSRIOV)) {
			t.Errorf("%s with VFs: dialects %v", c.model, g.Dialects)
		}
	}
}

func TestDiscoverT4(t *testing.T) {
	k := simkernel.NewExample(t, "t4.yaml")
	g := discoverOne(t, k, names(t))
	checkCommon(t, k, g)
	if g.VendorName != "NVIDIA Corporation" || g.DeviceName != "TU104GL [Tesla T4]" || g.Driver != "nvidia" || g.Class != 0x030200 {
		t.Errorf("T4 identity: %+v", g)
	}
	types, err := mdev.Types(k, g.Address.String())
	if err != nil || len(types) == 0 || !reflect.DeepEqual(g.MdevTypes, types) {
		t.Errorf("T4 mdev types %v differ from the parent's %v (%v)", g.MdevTypes, types, err)
	}
	// SR-IOV capable, but its vGPUs are mdevs of the PF.
	if !reflect.DeepEqual(g.Dialects, dialects(inventory.DialectMdev)) {
		t.Errorf("T4 dialects %v", g.Dialects)
	}
	if g.SRIOV == nil || g.SRIOV.TotalVFs != 16 {
		t.Errorf("T4 SR-IOV %+v", g.SRIOV)
	}
	if g.FramebufferMB != 16384 {
		t.Errorf("T4 framebuffer %d MB, want 16384", g.FramebufferMB)
	}

	// Instances show up under their type.
	u := "11111111-2222-3333-4444-555555555555"
	q4 := ""
	for _, ty := range g.MdevTypes {
		if ty.Name == "GRID T4-4Q" {
			q4 = ty.ID
		}
	}
	if err := mdev.Create(k, g.Address.String(), q4, u); err != nil {
		t.Fatal(err)
	}
	g = discoverOne(t, k, nil)
	for _, ty := range g.MdevTypes {
		if ty.ID == q4 && (!reflect.DeepEqual(ty.Instances, []string{u}) || ty.AvailableInstances != 3) {
			t.Errorf("after one instance: %+v", ty)
		}
	}
	// Without names the ids speak.
	if g.VendorName != "0x10de" || g.DeviceName != "0x1eb8" {
		t.Errorf("nil Names gave %q %q", g.VendorName, g.DeviceName)
	}
}

func TestDiscoverA100(t *testing.T) {
	k := simkernel.NewExample(t, "a100.yaml")
	g := discoverOne(t, k, names(t))
	checkCommon(t, k, g)
	// Before VFs nothing shows the split: the host driver, R535 (vGPU 16),
	// has an mdev per VF.
	if !reflect.DeepEqual(g.Dialects, dialects(inventory.DialectSRIOVMdev)) || g.MdevTypes != nil || g.FramebufferMB != 0 {
		t.Errorf("A100 before VFs: dialects %v, types %v, fb %d", g.Dialects, g.MdevTypes, g.FramebufferMB)
	}
	g = withVFs(t, k, g)
	checkCommon(t, k, g)
	if !reflect.DeepEqual(g.Dialects, dialects(inventory.DialectSRIOVMdev)) {
		t.Errorf("A100 with VFs: dialects %v", g.Dialects)
	}
	if len(g.SRIOV.VFs) != 16 || g.SRIOV.VFs[0].Address != pci.MustParseAddress("0000:65:00.4") {
		t.Fatalf("A100 VFs %+v", g.SRIOV.VFs)
	}
	for _, vf := range g.SRIOV.VFs {
		types, _ := mdev.Types(k, vf.Address.String())
		if vf.Driver != "nvidia" || len(vf.MdevTypes) == 0 || !reflect.DeepEqual(vf.MdevTypes, types) || vf.NVIDIA != nil {
			t.Errorf("A100 VF %+v", vf)
		}
	}
	if g.FramebufferMB != 40960 {
		t.Errorf("A100 framebuffer %d MB, want 40960 (A100-40C x1)", g.FramebufferMB)
	}
}

// The same board on a vGPU 17+ host: before its VFs exist the host
// driver's branch (R550) says per-VF types, and the VFs then show them.
func TestDiscoverA100VF(t *testing.T) {
	k := simkernel.NewExample(t, "a100-vf.yaml")
	g := discoverOne(t, k, nil)
	checkCommon(t, k, g)
	if !reflect.DeepEqual(g.Dialects, dialects(inventory.DialectNVIDIAVF)) {
		t.Errorf("A100 on R550 before VFs: dialects %v", g.Dialects)
	}
	if g = withVFs(t, k, g); !reflect.DeepEqual(g.Dialects, dialects(inventory.DialectNVIDIAVF)) {
		t.Errorf("A100 on R550 with VFs: dialects %v", g.Dialects)
	}
}

// An R550+ A100 on a kernel before 6.8 (RHEL 9, Ubuntu 22.04; the fake's
// release for such a host) keeps an mdev per VF: the kernel's release says
// so before the VFs exist, and they then show it.
func TestDiscoverA100MdevOnR550(t *testing.T) {
	k, err := simkernel.New(simkernel.Host{NVIDIADriver: "550.163.10", GPUs: []simkernel.HostGPU{
		{Model: simkernel.ModelA100, Address: pci.MustParseAddress("0000:65:00.0")}}})
	if err != nil {
		t.Fatal(err)
	}
	if g := discoverOne(t, k, nil); !reflect.DeepEqual(g.Dialects, dialects(inventory.DialectSRIOVMdev)) {
		t.Errorf("before VFs: dialects %v, want the kernel's word", g.Dialects)
	}
	if err := sysfstest.EnableVFs(k, "0000:65:00.0", 0); err != nil {
		t.Fatal(err)
	}
	if g := discoverOne(t, k, nil); !reflect.DeepEqual(g.Dialects, dialects(inventory.DialectSRIOVMdev)) {
		t.Errorf("with VFs: dialects %v, want what they show", g.Dialects)
	}
}

// countingFS counts reads of one file.
type countingFS struct {
	sysfs.FS
	name  string
	reads *int
}

func (c countingFS) ReadFile(name string) ([]byte, error) {
	if name == c.name {
		*c.reads++
	}
	return c.FS.ReadFile(name)
}

// One discovery reads the module's version once for all its NVIDIA GPUs
// (their driver's kind and branch), and not at all without one; an absent
// module is no error.
func TestDiscoverReadsHostDriverOnce(t *testing.T) {
	for _, c := range []struct {
		host  simkernel.Host
		reads int
	}{
		{simkernel.Host{GPUs: []simkernel.HostGPU{
			{Model: simkernel.ModelA100VF, Address: pci.MustParseAddress("0000:ca:00.0")},
			{Model: simkernel.ModelH100VF, Address: pci.MustParseAddress("0000:cb:00.0")},
			{Model: simkernel.ModelL40S, Address: pci.MustParseAddress("0000:86:00.0")},
		}}, 1},
		{simkernel.Host{GPUs: []simkernel.HostGPU{{Model: simkernel.ModelT4, Address: pci.MustParseAddress("0000:3b:00.0")}}}, 1},
		{simkernel.Host{GPUs: []simkernel.HostGPU{{Model: simkernel.ModelMI25, Address: pci.MustParseAddress("0000:03:00.0")}}}, 0},
	} {
		k, err := simkernel.New(c.host)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		gpus, err := inventory.Discover(countingFS{FS: k, name: inventory.NVIDIAVersion, reads: &n}, nil)
		if err != nil || n != c.reads {
			t.Errorf("%s: %d GPUs, %v; %d reads of the version, want %d", c.host.GPUs[0].Model, len(gpus), err, n, c.reads)
		}
	}
	// Without the module no vGPU dialect is on offer, and the reason says
	// so; with a malformed version the id decides; an unreadable version
	// fails the discovery, naming the file.
	k := simkernel.NewExample(t, "a100-vf.yaml")
	gone := overlayFS{FS: k, fail: map[string]error{inventory.NVIDIAVersion: syscall.ENOENT}}
	if g := discoverOne(t, gone, nil); !reflect.DeepEqual(g.Dialects, dialects()) || g.NVIDIADriver != nil ||
		len(g.Unavailable) != 1 || g.Unavailable[0].Dialect != inventory.DialectSRIOVMdev || !strings.Contains(g.Unavailable[0].Reason, "nvidia module is not loaded") {
		t.Errorf("A100 without the module's version: dialects %v, unavailable %v, driver %v", g.Dialects, g.Unavailable, g.NVIDIADriver)
	}
	odd := overlayFS{FS: k, files: map[string]string{inventory.NVIDIAVersion: "R550\n"}}
	if g := discoverOne(t, odd, nil); !reflect.DeepEqual(g.Dialects, dialects(inventory.DialectSRIOVMdev)) {
		t.Errorf("A100 with a malformed version: dialects %v", g.Dialects)
	}
	bad := overlayFS{FS: k, fail: map[string]error{inventory.NVIDIAVersion: syscall.EIO}}
	if _, err := inventory.Discover(bad, nil); !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), inventory.NVIDIAVersion) {
		t.Fatalf("Discover with an unreadable version = %v", err)
	}
	if _, err := inventory.Get(bad, nil, pci.MustParseAddress("0000:ca:00.0")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Get with an unreadable version = %v", err)
	}
}

func TestDiscoverL40S(t *testing.T) {
	k := simkernel.NewExample(t, "l40s.yaml")
	g := discoverOne(t, k, names(t))
	checkCommon(t, k, g)
	if !reflect.DeepEqual(g.Dialects, dialects(inventory.DialectNVIDIAVF)) || g.FramebufferMB != 0 {
		t.Errorf("L40S before VFs: dialects %v fb %d", g.Dialects, g.FramebufferMB)
	}
	if g.SRIOV == nil || g.SRIOV.TotalVFs != 32 || g.SRIOV.VFDeviceID != 0x26b9 {
		t.Errorf("L40S SR-IOV %+v", g.SRIOV)
	}
	g = withVFs(t, k, g)
	checkCommon(t, k, g)
	if !reflect.DeepEqual(g.Dialects, dialects(inventory.DialectNVIDIAVF)) {
		t.Errorf("L40S with VFs: dialects %v", g.Dialects)
	}
	for _, vf := range g.SRIOV.VFs {
		if vf.NVIDIA == nil || len(vf.NVIDIA.Creatable) == 0 || vf.NVIDIA.CurrentType != 0 || vf.MdevTypes != nil {
			t.Fatalf("L40S VF %+v", vf)
		}
	}
	if g.FramebufferMB != 48*1024 {
		t.Errorf("L40S framebuffer %d MB, want 49152 (L40S-48Q)", g.FramebufferMB)
	}
}

func TestDiscoverGVTgAndPlain(t *testing.T) {
	n := names(t)
	k := simkernel.NewExample(t, "gvtg.yaml")
	g := discoverOne(t, k, n)
	checkCommon(t, k, g)
	if g.Address != pci.MustParseAddress("0000:00:02.0") || g.Driver != "i915" || g.SRIOV != nil ||
		g.DeviceName != "CoffeeLake-S GT2 [UHD Graphics 630]" || len(g.MdevTypes) != 4 ||
		!reflect.DeepEqual(g.Dialects, dialects(inventory.DialectMdev)) || g.FramebufferMB != 0 {
		t.Errorf("GVT-g: %+v", g)
	}

	k = simkernel.NewExample(t, "plain.yaml")
	g = discoverOne(t, k, n)
	checkCommon(t, k, g)
	if g.Driver != "nouveau" || g.SRIOV != nil || g.MdevTypes != nil || g.DeviceName != "GA102 [GeForce RTX 3090]" ||
		!reflect.DeepEqual(g.Dialects, dialects()) {
		t.Errorf("plain: %+v", g)
	}
}

func TestDiscoverNonGPUs(t *testing.T) {
	for _, model := range []string{"mbochs", "mtty", "qemu-nvme"} {
		k := simkernel.NewExample(t, model+".yaml")
		gpus, err := inventory.Discover(k, nil)
		if err != nil || len(gpus) != 0 {
			t.Errorf("%s: Discover = %+v, %v; want no GPU", model, gpus, err)
		}
	}
	k := simkernel.NewExample(t, "qemu-nvme.yaml")
	_, err := inventory.Get(k, nil, pci.MustParseAddress("0000:01:00.0"))
	if !errors.Is(err, inventory.ErrNotGPU) || !strings.Contains(err.Error(), "0x010802") {
		t.Errorf("Get(nvme) = %v, want ErrNotGPU with the class", err)
	}
}

func TestDiscoverMixed(t *testing.T) {
	k := simkernel.NewExample(t, "mixed.yaml")
	gpus, err := inventory.Discover(k, names(t))
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	groups := map[int]bool{}
	for _, g := range gpus {
		checkCommon(t, k, g)
		addrs = append(addrs, g.Address.String())
		groups[g.IOMMUGroup] = true
	}
	want := []string{"0000:00:02.0", "0000:03:00.0", "0000:3b:00.0", "0000:86:00.0"}
	if !reflect.DeepEqual(addrs, want) {
		t.Fatalf("Discover(mixed) = %v, want %v in order", addrs, want)
	}
	if len(groups) != 4 {
		t.Errorf("GPUs share IOMMU groups: %v", groups)
	}
	if gpus[3].NUMANode != 1 || gpus[1].NUMANode != 0 {
		t.Errorf("NUMA: l40s %d, mi25 %d", gpus[3].NUMANode, gpus[1].NUMANode)
	}
	wantDialects := [][]inventory.Dialect{
		dialects(inventory.DialectMdev), dialects(inventory.DialectSRIOV),
		dialects(inventory.DialectMdev), dialects(inventory.DialectNVIDIAVF),
	}
	for i, g := range gpus {
		if !reflect.DeepEqual(g.Dialects, wantDialects[i]) {
			t.Errorf("%s dialects %v, want %v", g.Address, g.Dialects, wantDialects[i])
		}
		got, err := inventory.Get(k, names(t), g.Address)
		if err != nil || !reflect.DeepEqual(got, g) {
			t.Errorf("Get(%s) = %+v, %v; differs from Discover", g.Address, got, err)
		}
	}
	if ps, err := inventory.MdevParents(k, nil); err != nil || len(ps) != 0 {
		t.Errorf("MdevParents(mixed) = %+v, %v; every parent is a GPU", ps, err)
	}
}

func TestGetRefusals(t *testing.T) {
	k := simkernel.NewExample(t, "mi25.yaml")
	_, err := inventory.Get(k, nil, pci.MustParseAddress("0000:99:00.0"))
	if !errors.Is(err, pci.ErrNoDevice) || !strings.Contains(err.Error(), "/sys/bus/pci/devices/0000:99:00.0") {
		t.Errorf("Get(missing) = %v", err)
	}
	pf := pci.MustParseAddress("0000:03:00.0")
	if err := sriov.SetNumVFs(k, pf, 1); err != nil {
		t.Fatal(err)
	}
	_, err = inventory.Get(k, nil, pci.MustParseAddress("0000:03:00.1"))
	if !errors.Is(err, inventory.ErrIsVF) || !strings.Contains(err.Error(), "of 0000:03:00.0") {
		t.Errorf("Get(VF) = %v, want ErrIsVF naming the PF", err)
	}
	// The root port the GPU sits behind is not a GPU.
	gpus, _ := inventory.Discover(k, nil)
	if len(gpus) != 1 {
		t.Fatalf("Discover with a VF = %d GPUs, want the PF only", len(gpus))
	}
}

func TestMdevParents(t *testing.T) {
	k := simkernel.NewExample(t, "all.yaml")
	n := names(t)
	gpus, err := inventory.Discover(k, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 12 { // all but mbochs, mtty, the NVMe and the NIC
		t.Fatalf("Discover(all) found %d GPUs", len(gpus))
	}
	for _, g := range gpus {
		checkCommon(t, k, g)
	}
	// The GPUs' parents (GVT-g's PF, the T4, the L40S's VFs) are not virtual.
	if vs, err := inventory.VirtualMdevParents(k); err != nil || len(vs) != 2 || vs[0].Name != "mbochs" || vs[1].Name != "mtty" {
		t.Fatalf("VirtualMdevParents(all) = %+v, %v; want mbochs and mtty", vs, err)
	}
	// A100 VFs become mdev parents; they belong to their GPU, not here.
	// (all.yaml is a vGPU 17+ host: its A100's VFs take types.)
	k, err = simkernel.New(simkernel.Host{GPUs: []simkernel.HostGPU{
		{Model: simkernel.ModelA100, Address: pci.MustParseAddress("0000:65:00.0")},
		{Model: simkernel.ModelMbochs}, {Model: simkernel.ModelMtty},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sysfstest.EnableVFs(k, "0000:65:00.0", 0); err != nil {
		t.Fatal(err)
	}
	ps, err := inventory.MdevParents(k, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Name != "mbochs" || ps[1].Name != "mtty" {
		t.Fatalf("MdevParents = %+v", ps)
	}
	for _, p := range ps {
		types, _ := mdev.Types(k, p.Name)
		if p.PCI != nil || p.Path != "/sys/devices/virtual/"+p.Name+"/"+p.Name || !reflect.DeepEqual(p.Types, types) || len(p.Types) == 0 {
			t.Errorf("parent %+v", p)
		}
	}
	if vs, err := inventory.VirtualMdevParents(k); err != nil || !reflect.DeepEqual(vs, ps) {
		t.Errorf("VirtualMdevParents = %+v, %v; want MdevParents' %+v", vs, err, ps)
	}
	// One by name: a virtual parent is found; a GPU's VF, a parent too, is
	// not one, and the error lists those there are.
	if p, err := inventory.VirtualMdevParent(k, "mtty"); err != nil || !reflect.DeepEqual(p, ps[1]) {
		t.Errorf("VirtualMdevParent(mtty) = %+v, %v; want %+v", p, err, ps[1])
	}
	if all, _ := mdev.Parents(k); !slices.Contains(all, "0000:65:00.4") {
		t.Fatalf("mdev parents %v: the A100's first VF is not one", all)
	}
	vf, err := inventory.VirtualMdevParent(k, "0000:65:00.4")
	if !errors.Is(err, mdev.ErrNoParent) || !strings.Contains(err.Error(), `"0000:65:00.4" among the virtual mdev parents (mbochs, mtty)`) {
		t.Errorf("VirtualMdevParent of a VF = %+v, %v; want ErrNoParent naming mbochs and mtty", vf, err)
	}
}

// overlayFS adds or breaks single attributes of a real fake kernel, for
// what its models do not show (amdgpu's VRAM size) or cannot fail (reads).
type overlayFS struct {
	sysfs.FS
	files map[string]string
	fail  map[string]error
}

func (o overlayFS) ReadFile(name string) ([]byte, error) {
	if err, ok := o.fail[name]; ok {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	if s, ok := o.files[name]; ok {
		return []byte(s), nil
	}
	return o.FS.ReadFile(name)
}

func (o overlayFS) Stat(name string) (fs.FileInfo, error) {
	if _, ok := o.files[name]; ok {
		return o.FS.Stat(sysfs.PCIDevices) // any existing node will do
	}
	return o.FS.Stat(name)
}

func TestFramebufferFromAMDGPU(t *testing.T) {
	k := simkernel.NewExample(t, "mi25.yaml")
	f := overlayFS{FS: k, files: map[string]string{
		"/sys/bus/pci/devices/0000:03:00.0/mem_info_vram_total": "17196646400\n", // 16 GiB + 16 MiB
	}}
	if g := discoverOne(t, f, nil); g.FramebufferMB != 16384+16 {
		t.Fatalf("framebuffer %d MB from mem_info_vram_total", g.FramebufferMB)
	}
	f.files["/sys/bus/pci/devices/0000:03:00.0/mem_info_vram_total"] = "lots\n"
	if _, err := inventory.Discover(f, nil); err == nil || !strings.Contains(err.Error(), "mem_info_vram_total") {
		t.Fatalf("Discover with a bad VRAM size = %v", err)
	}
}

func TestDiscoverReadErrors(t *testing.T) {
	k := simkernel.NewExample(t, "mixed.yaml")
	class := "/sys/bus/pci/devices/0000:3b:00.0/class"
	_, err := inventory.Discover(overlayFS{FS: k, fail: map[string]error{class: syscall.EIO}}, nil)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), class) {
		t.Fatalf("Discover with an unreadable class = %v", err)
	}
	// A device that vanishes between listing and reading is skipped.
	gpus, err := inventory.Discover(overlayFS{FS: k, fail: map[string]error{class: syscall.ENOENT}}, nil)
	if err != nil || len(gpus) != 3 {
		t.Fatalf("Discover with a vanished device = %d GPUs, %v", len(gpus), err)
	}
	name := "/sys/class/mdev_bus/0000:3b:00.0/mdev_supported_types/" + firstType(t, k, "0000:3b:00.0") + "/available_instances"
	_, err = inventory.Discover(overlayFS{FS: k, fail: map[string]error{name: syscall.EIO}}, nil)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "read mdev types of 0000:3b:00.0") {
		t.Fatalf("Discover with an unreadable type = %v", err)
	}
}

func firstType(t *testing.T, f sysfs.FS, parent string) string {
	t.Helper()
	ts, err := mdev.Types(f, parent)
	if err != nil || len(ts) == 0 {
		t.Fatalf("Types(%s) = %v, %v", parent, ts, err)
	}
	return ts[0].ID
}
