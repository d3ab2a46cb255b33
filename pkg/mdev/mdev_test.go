package mdev_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"syscall"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/pci/pcitest"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

const (
	t4   = "0000:3b:00.0"
	gvtg = "0000:00:02.0"
	u1   = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
	u2   = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002"
	u3   = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1003"
)

func newKernel(t *testing.T) *simkernel.Kernel {
	t.Helper()
	k, err := simkernel.New(simkernel.Host{Version: "v1", I915EnableGVT: true, KVMGT: true, GPUs: []simkernel.HostGPU{
		{Model: "t4", Address: pci.MustParseAddress(t4)},
		{Model: "gvtg"},
		{Model: "mbochs"},
		{Model: "mtty"},
		{Model: "plain", Address: pci.MustParseAddress("0000:5e:00.0")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// typeByID and typeByName find one of parent's types, failing the test
// when it is not offered.
func typeByID(t *testing.T, f sysfs.FS, parent, id string) mdev.Type {
	t.Helper()
	return findType(t, f, parent, "id "+id, func(ty mdev.Type) bool { return ty.ID == id })
}

func typeByName(t *testing.T, f sysfs.FS, parent, name string) mdev.Type {
	t.Helper()
	return findType(t, f, parent, "named "+name, func(ty mdev.Type) bool { return ty.Name == name })
}

func findType(t *testing.T, f sysfs.FS, parent, what string, match func(mdev.Type) bool) mdev.Type {
	t.Helper()
	ts, err := mdev.Types(f, parent)
	if err != nil {
		t.Fatalf("Types(%s): %v", parent, err)
	}
	for _, ty := range ts {
		if match(ty) {
			return ty
		}
	}
	t.Fatalf("%s offers no type %s", parent, what)
	return mdev.Type{}
}

func TestParents(t *testing.T) {
	k := newKernel(t)
	got, err := mdev.Parents(k)
	want := []string{gvtg, t4, "mbochs", "mtty"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Parents = %v, %v; want %v", got, err, want)
	}
	for name, want := range map[string]string{
		"mbochs": "/sys/devices/virtual/mbochs/mbochs",
		t4:       "/" + t4,
		gvtg:     "/sys/devices/pci0000:00/0000:00:02.0",
	} {
		p, err := mdev.ParentPath(k, name)
		if err != nil || !strings.HasSuffix(p, want) || !strings.HasPrefix(p, "/sys/devices/") {
			t.Errorf("ParentPath(%s) = %q, %v; want .../%s", name, p, err, want)
		}
	}
	for _, bad := range []string{"0000:5e:00.0", "nope", "", "..", "../mdev_bus"} {
		if _, err := mdev.ParentPath(k, bad); !errors.Is(err, mdev.ErrNoParent) {
			t.Errorf("ParentPath(%q) = %v, want ErrNoParent", bad, err)
		}
		if ok, err := mdev.IsParent(k, bad); ok || err != nil {
			t.Errorf("IsParent(%q) = %v, %v", bad, ok, err)
		}
	}
	if _, err := mdev.Types(k, "nope"); !errors.Is(err, mdev.ErrNoParent) {
		t.Errorf("Types(nope) = %v", err)
	}
}

func TestTypesNVIDIA(t *testing.T) {
	k := newKernel(t)
	ts, err := mdev.Types(k, t4)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) < 5 {
		t.Fatalf("T4 offers %d types", len(ts))
	}
	for i, ty := range ts {
		// Every T4 type splits the same 16 GB, and an idle GPU offers all.
		if !strings.HasPrefix(ty.ID, "nvidia-") || !strings.HasPrefix(ty.Name, "GRID T4-") || ty.DeviceAPI != "vfio-pci" ||
			ty.FramebufferMB*uint64(ty.MaxInstances) != 16384 || ty.AvailableInstances != ty.MaxInstances || len(ty.Instances) != 0 {
			t.Errorf("T4 type %+v", ty)
		}
		if i > 0 && ts[i-1].ID >= ty.ID {
			t.Errorf("types not sorted by id: %s before %s", ts[i-1].ID, ty.ID)
		}
	}
	got := typeByName(t, k, t4, "GRID T4-4Q")
	want := mdev.Type{
		ID: got.ID, Name: "GRID T4-4Q",
		Description:        "num_heads=4, frl_config=60, framebuffer=4096M, max_resolution=7680x4320, max_instance=4",
		DeviceAPI:          "vfio-pci",
		AvailableInstances: 4, MaxInstances: 4, FramebufferMB: 4096,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GRID T4-4Q = %+v\nwant %+v", got, want)
	}
}

func TestTypesGVTg(t *testing.T) {
	k := newKernel(t)
	// The fake's default 1024 MB aperture: the counts are not the suffixes.
	for id, n := range map[string]int{"i915-GVTg_V5_8": 7, "i915-GVTg_V5_4": 5, "i915-GVTg_V5_2": 2, "i915-GVTg_V5_1": 1} {
		ty := typeByID(t, k, gvtg, id)
		if ty.MaxInstances != 0 || ty.AvailableInstances != n || ty.FramebufferMB != 0 {
			t.Errorf("%s: max %d, available %d, fb %d; want 0 (the description has none), %d, 0", id, ty.MaxInstances, ty.AvailableInstances, ty.FramebufferMB, n)
		}
		if ty.Name != strings.TrimPrefix(id, "i915-") || !strings.Contains(ty.Description, "low_gm_size") {
			t.Errorf("%s: name %q, description %q", id, ty.Name, ty.Description)
		}
	}
}

func TestTypesSamples(t *testing.T) {
	k := newKernel(t)
	ts, err := mdev.Types(k, "mtty")
	if err != nil || len(ts) != 2 {
		t.Fatalf("mtty types = %v, %v", ts, err)
	}
	// mtty has no description attribute: nothing to parse, no error.
	if ts[0].ID != "mtty-1" || ts[0].Name != "Single port serial" || ts[0].Description != "" || ts[0].AvailableInstances != 24 {
		t.Fatalf("mtty-1 = %+v", ts[0])
	}
	for id, fb := range map[string]uint64{"mbochs-small": 4, "mbochs-medium": 16, "mbochs-large": 64} {
		if ty := typeByID(t, k, "mbochs", id); ty.FramebufferMB != fb || ty.AvailableInstances != int(256/fb) {
			t.Errorf("%s = %+v, want %d MB and %d available", id, ty, fb, 256/fb)
		}
	}
}

func TestCreateGetRemove(t *testing.T) {
	k := newKernel(t)
	if err := mdev.Create(k, "mbochs", "mbochs-large", strings.ToUpper(u1)); err != nil {
		t.Fatal(err)
	}
	// One 64 MB instance takes from the shared 256 MB pool (docs/lab.md).
	for id, avail := range map[string]int{"mbochs-small": 48, "mbochs-medium": 12, "mbochs-large": 3} {
		if ty := typeByID(t, k, "mbochs", id); ty.AvailableInstances != avail {
			t.Errorf("%s available %d, want %d", id, ty.AvailableInstances, avail)
		}
	}
	if ty := typeByID(t, k, "mbochs", "mbochs-large"); !reflect.DeepEqual(ty.Instances, []string{u1}) {
		t.Fatalf("mbochs-large instances = %v", ty.Instances)
	}
	in, ok, err := mdev.Get(k, u1)
	if err != nil || !ok || in.UUID != u1 || in.Parent != "mbochs" || in.Type != "mbochs-large" || in.IOMMUGroup < 0 {
		t.Fatalf("Get = %+v, %v, %v", in, ok, err)
	}
	if ok, _ := sysfs.Exists(k, pci.GroupDevicePath(in.IOMMUGroup)); !ok {
		t.Fatalf("no /dev/vfio/%d for the mdev", in.IOMMUGroup)
	}
	if g, drv, err := mdev.Binding(k, u1); err != nil || g != in.IOMMUGroup || drv != in.Driver {
		t.Fatalf("Binding = %d, %q, %v; want Get's %d, %q", g, drv, err, in.IOMMUGroup, in.Driver)
	}

	q4 := typeByName(t, k, t4, "GRID T4-4Q").ID
	if err := mdev.Create(k, t4, q4, u2); err != nil {
		t.Fatal(err)
	}
	all, err := mdev.Instances(k)
	if err != nil || len(all) != 2 || all[0].UUID != u1 || all[1].UUID != u2 || all[1].Parent != t4 || all[1].Type != q4 {
		t.Fatalf("Instances = %+v, %v", all, err)
	}
	if all[0].IOMMUGroup == all[1].IOMMUGroup {
		t.Fatal("two mdevs share an IOMMU group")
	}

	if err := mdev.Remove(k, u1); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := mdev.Get(k, u1); ok || err != nil {
		t.Fatalf("Get after Remove = %v, %v", ok, err)
	}
	if g, drv, err := mdev.Binding(k, u1); err != nil || g != -1 || drv != "" {
		t.Fatalf("Binding after Remove = %d, %q, %v; want no group, no driver", g, drv, err)
	}
	if ty := typeByID(t, k, "mbochs", "mbochs-large"); ty.AvailableInstances != 4 || len(ty.Instances) != 0 {
		t.Fatalf("after Remove mbochs-large = %+v", ty)
	}
	err = mdev.Remove(k, u1)
	if !errors.Is(err, mdev.ErrNotFound) || !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "mdev "+u1+" does not exist") {
		t.Fatalf("Remove of an absent mdev = %v", err)
	}
	if _, ok, err := mdev.Get(k, u3); ok || err != nil {
		t.Fatalf("Get(absent) = %v, %v", ok, err)
	}
	if _, _, err := mdev.Get(k, "junk"); !errors.Is(err, mdev.ErrInvalidUUID) {
		t.Fatalf("Get(junk) = %v", err)
	}
	if _, _, err := mdev.Binding(k, "junk"); !errors.Is(err, mdev.ErrInvalidUUID) {
		t.Fatalf("Binding(junk) = %v", err)
	}
}

func TestCreateRefusals(t *testing.T) {
	k := newKernel(t)
	whole := typeByName(t, k, t4, "GRID T4-16Q").ID // the whole GPU
	small := typeByName(t, k, t4, "GRID T4-1Q").ID
	create := "/sys/class/mdev_bus/" + t4 + "/mdev_supported_types/" + whole + "/create"

	if err := mdev.Create(k, t4, whole, "not-a-uuid"); !errors.Is(err, mdev.ErrInvalidUUID) {
		t.Fatalf("Create with a bad UUID = %v", err)
	}
	if k.Writes(create) != 0 {
		t.Fatal("a bad UUID reached the kernel")
	}
	err := mdev.Create(k, t4, "nvidia-999", u1)
	offer, _ := mdev.Types(k, t4)
	if !errors.Is(err, mdev.ErrNoType) || !strings.Contains(err.Error(), offer[0].ID+", "+offer[1].ID) {
		t.Fatalf("Create of an unknown type = %v, want ErrNoType listing the offer", err)
	}
	if err := mdev.Create(k, "0000:5e:00.0", whole, u1); !errors.Is(err, mdev.ErrNoParent) {
		t.Fatalf("Create on a non-parent = %v", err)
	}
	if err := mdev.Create(k, t4, "../../x", u1); !errors.Is(err, mdev.ErrNoType) {
		t.Fatalf("Create with a path as type = %v", err)
	}

	if err := mdev.Create(k, t4, whole, u1); err != nil {
		t.Fatal(err)
	}
	err = mdev.Create(k, t4, whole, u1)
	if !errors.Is(err, mdev.ErrExists) || !errors.Is(err, syscall.EEXIST) ||
		!strings.Contains(err.Error(), "mdev "+u1+" already exists (type "+whole+" on "+t4+")") {
		t.Fatalf("Create of an existing UUID = %v", err)
	}
	err = mdev.Create(k, t4, whole, u2)
	if !errors.Is(err, mdev.ErrNoCapacity) || !errors.Is(err, syscall.ENOSPC) ||
		!strings.Contains(err.Error(), "no instance of "+whole+" fits on "+t4+" (available_instances 0)") ||
		!strings.Contains(err.Error(), create) {
		t.Fatalf("Create on a full GPU = %v", err)
	}
	// One type per GPU (time-sliced NVIDIA vGPU): a small type does not fit either.
	if err := mdev.Create(k, t4, small, u2); !errors.Is(err, mdev.ErrNoCapacity) {
		t.Fatalf("Create of a second type = %v", err)
	}

	k.InjectFault(simkernel.Fault{Path: "/sys/class/mdev_bus/mbochs/mdev_supported_types/mbochs-small/create", Errno: syscall.EUSERS})
	if err := mdev.Create(k, "mbochs", "mbochs-small", u3); !errors.Is(err, mdev.ErrNoCapacity) || !errors.Is(err, syscall.EUSERS) {
		t.Fatalf("Create answered EUSERS (mdpy) = %v, want ErrNoCapacity", err)
	}
	k.InjectFault(simkernel.Fault{Path: "/sys/class/mdev_bus/mbochs/mdev_supported_types/mbochs-small/create", Errno: syscall.EIO})
	if err := mdev.Create(k, "mbochs", "mbochs-small", u3); !errors.Is(err, syscall.EIO) || errors.Is(err, mdev.ErrNoCapacity) {
		t.Fatalf("Create answered EIO = %v", err)
	}
}

func TestRemoveFault(t *testing.T) {
	k := newKernel(t)
	if err := mdev.Create(k, "mtty", "mtty-2", u1); err != nil {
		t.Fatal(err)
	}
	k.InjectFault(simkernel.Fault{Path: "/sys/bus/mdev/devices/" + u1 + "/remove", Errno: syscall.EIO})
	err := mdev.Remove(k, u1)
	if !errors.Is(err, syscall.EIO) || errors.Is(err, mdev.ErrNotFound) || !strings.Contains(err.Error(), "remove mdev "+u1+" via /sys/bus/mdev/devices/"+u1+"/remove") {
		t.Fatalf("Remove with a fault = %v", err)
	}
	if _, ok, _ := mdev.Get(k, u1); !ok {
		t.Fatal("the mdev went away despite the failed remove")
	}
	if err := mdev.Remove(k, "nope"); !errors.Is(err, mdev.ErrInvalidUUID) {
		t.Fatalf("Remove(nope) = %v", err)
	}
}

// Remove blocks while a VM holds the mdev, as the kernel does; it finishes
// once the VM lets go.
func TestRemoveWaitsForUser(t *testing.T) {
	k := newKernel(t)
	if err := mdev.Create(k, "mtty", "mtty-1", u1); err != nil {
		t.Fatal(err)
	}
	in, _, _ := mdev.Get(k, u1)
	h, err := k.OpenDevice(pci.GroupDevicePath(in.IOMMUGroup))
	if err != nil {
		t.Fatal(err)
	}
	if h, in, err := (carve.VFIOUsage{FS: k}).Holder(context.Background(), u1); err != nil || !in || !strings.Contains(h, "qemu-system-x86") {
		t.Fatalf("Holder of a held mdev = %q, %v, %v", h, in, err)
	}
	pcitest.BlocksUntilReleased(t, "Remove", h, func() error { return mdev.Remove(k, u1) })
	if _, ok, _ := mdev.Get(k, u1); ok {
		t.Fatal("mdev still there")
	}
}

// A100 class: each VF is an mdev parent with one instance.
func TestVFParents(t *testing.T) {
	pf := pci.MustParseAddress("0000:ca:00.0")
	k, err := simkernel.New(simkernel.Host{Version: "v1", I915EnableGVT: true, KVMGT: true, GPUs: []simkernel.HostGPU{{Model: "a100", Address: pf}}})
	if err != nil {
		t.Fatal(err)
	}
	if ps, _ := mdev.Parents(k); len(ps) != 0 {
		t.Fatalf("A100 parents before VFs: %v", ps)
	}
	if err := sysfstest.EnableVFs(k, pf.String(), 0); err != nil { // sriov-manage: all 16
		t.Fatal(err)
	}
	ps, err := mdev.Parents(k)
	if err != nil || len(ps) != 16 || !reflect.DeepEqual(ps[:2], []string{"0000:ca:00.4", "0000:ca:00.5"}) {
		t.Fatalf("Parents = %v, %v", ps, err)
	}
	ty := typeByName(t, k, "0000:ca:00.4", "NVIDIA A100-10C")
	if ty.FramebufferMB != 10240 || ty.MaxInstances != 4 || ty.AvailableInstances != 1 {
		t.Fatalf("A100-10C on a VF = %+v, want 10 GB, 4 per GPU, 1 per VF", ty)
	}
	if err := mdev.Create(k, "0000:ca:00.4", ty.ID, u1); err != nil {
		t.Fatal(err)
	}
	if err := mdev.Create(k, "0000:ca:00.4", ty.ID, u2); !errors.Is(err, mdev.ErrNoCapacity) {
		t.Fatalf("a second mdev on one VF = %v", err)
	}
	if err := mdev.Create(k, "0000:ca:00.5", ty.ID, u2); err != nil {
		t.Fatal(err)
	}
	in, _, _ := mdev.Get(k, u2)
	if in.Parent != "0000:ca:00.5" {
		t.Fatalf("parent %q", in.Parent)
	}
}
