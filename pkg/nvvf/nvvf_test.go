package nvvf_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/nvvf"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

var (
	l40s = pci.MustParseAddress("0000:41:00.0")
	vf0  = pci.MustParseAddress("0000:41:00.4") // NVIDIA VFs start at .4
	vf1  = pci.MustParseAddress("0000:41:00.5")
	mi25 = pci.MustParseAddress("0000:03:00.0")
)

func newKernel(t *testing.T) *simkernel.Kernel {
	t.Helper()
	k, err := simkernel.New(simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{
		{Model: "l40s", Address: l40s},
		{Model: "mi25", Address: mi25},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sysfstest.EnableVFs(k, l40s.String(), 0); err != nil {
		t.Fatal(err)
	}
	return k
}

func read(t *testing.T, f sysfs.FS, vf pci.Address) ([]nvvf.VGPUType, int) {
	t.Helper()
	c, cur, ok, err := nvvf.Read(f, vf)
	if err != nil || !ok {
		t.Fatalf("Read(%s) = %v, %v", vf, ok, err)
	}
	return c, cur
}

func idOf(t *testing.T, ts []nvvf.VGPUType, name string) int {
	t.Helper()
	for _, ty := range ts {
		if ty.Name == name {
			return ty.ID
		}
	}
	t.Fatalf("no %s in %v", name, ts)
	return 0
}

func TestRead(t *testing.T) {
	k := newKernel(t)
	if _, _, ok, err := nvvf.Read(k, l40s); ok || err != nil {
		t.Fatalf("Read(PF) = %v, %v; the PF has no nvidia/ dir", ok, err)
	}
	c, cur := read(t, k, vf0)
	if cur != 0 || len(c) < 2 {
		t.Fatalf("idle VF: current %d, creatable %v", cur, c)
	}
	for _, ty := range c {
		if ty.ID <= 0 || !strings.HasPrefix(ty.Name, "NVIDIA L40S-") {
			t.Fatalf("creatable entry %+v", ty)
		}
	}
	idOf(t, c, "NVIDIA L40S-48Q")
}

func TestSetAndClearType(t *testing.T) {
	k := newKernel(t)
	c, _ := read(t, k, vf0)
	q24, q48 := idOf(t, c, "NVIDIA L40S-24Q"), idOf(t, c, "NVIDIA L40S-48Q")
	node := func(vf pci.Address) string {
		g, _, _ := pci.IOMMUGroup(k, vf)
		return pci.GroupDevicePath(g)
	}
	// The driver registers the VF with VFIO at probe, but opens it only
	// once it has a type.
	if _, err := k.OpenDevice(node(vf0)); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("open before a type is set: %v, want ENODEV", err)
	}
	if err := nvvf.SetType(k, vf0, q24); err != nil {
		t.Fatal(err)
	}
	if c, cur := read(t, k, vf0); cur != q24 || len(c) != 0 {
		t.Fatalf("after SetType: current %d, creatable %v", cur, c)
	}
	// The VF is a VFIO device a VM can open now, still on nvidia.
	if ok, _ := sysfs.Exists(k, node(vf0)); !ok {
		t.Fatal("no /dev/vfio node after SetType")
	}
	if drv, _ := pci.CurrentDriver(k, vf0); drv != "nvidia" {
		t.Fatalf("VF on %q", drv)
	}
	// The sibling's list shrinks to what still fits: one more 24 GB.
	sib, _ := read(t, k, vf1)
	if len(sib) != 1 || sib[0].ID != q24 {
		t.Fatalf("sibling creatable = %v, want only the 24Q", sib)
	}

	p := nvvf.Dir(vf0) + "/current_vgpu_type"
	w := k.Writes(p)
	if err := nvvf.SetType(k, vf0, q24); err != nil {
		t.Fatal(err)
	}
	err := nvvf.SetType(k, vf0, q48)
	if !errors.Is(err, nvvf.ErrTypeSet) || !strings.Contains(err.Error(), p) {
		t.Fatalf("SetType over another type = %v", err)
	}
	if k.Writes(p) != w {
		t.Fatal("an unchanged or refused SetType wrote")
	}
	err = nvvf.SetType(k, vf1, q48)
	if !errors.Is(err, nvvf.ErrNotCreatable) || !strings.Contains(err.Error(), "NVIDIA L40S-24Q") {
		t.Fatalf("SetType of a type that no longer fits = %v, want the creatable list", err)
	}

	// A VM holds the vGPU: the driver refuses to free it.
	h, err := k.OpenDevice(node(vf0))
	if err != nil {
		t.Fatal(err)
	}
	err = nvvf.ClearType(k, vf0)
	if !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("ClearType while held = %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := nvvf.ClearType(k, vf0); err != nil {
		t.Fatal(err)
	}
	if _, cur := read(t, k, vf0); cur != 0 {
		t.Fatalf("current %d after ClearType", cur)
	}
	if _, err := k.OpenDevice(node(vf0)); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("open after ClearType: %v, want ENODEV", err)
	}
	w = k.Writes(p)
	if err := nvvf.ClearType(k, vf0); err != nil || k.Writes(p) != w {
		t.Fatalf("ClearType of a free VF = %v, wrote %d", err, k.Writes(p)-w)
	}
	if sib, _ := read(t, k, vf1); len(sib) < 2 {
		t.Fatalf("sibling creatable after clearing = %v, want the full list back", sib)
	}
}

func TestRefusals(t *testing.T) {
	k := newKernel(t)
	if err := nvvf.SetType(k, vf0, 0); err == nil {
		t.Fatal("SetType(0) succeeded")
	}
	if err := nvvf.SetType(k, vf0, 99999); !errors.Is(err, nvvf.ErrNotCreatable) {
		t.Fatalf("SetType of an unknown id = %v", err)
	}
	if err := sriov.SetNumVFs(k, mi25, 1); err != nil {
		t.Fatal(err)
	}
	amdVF := pci.MustParseAddress("0000:03:00.1")
	if err := nvvf.SetType(k, amdVF, 1); !errors.Is(err, nvvf.ErrNoNVIDIADir) {
		t.Fatalf("SetType on an AMD VF = %v", err)
	}
	if err := nvvf.ClearType(k, amdVF); !errors.Is(err, nvvf.ErrNoNVIDIADir) {
		t.Fatalf("ClearType on an AMD VF = %v", err)
	}

	c, _ := read(t, k, vf0)
	q4 := idOf(t, c, "NVIDIA L40S-4Q")
	p := nvvf.Dir(vf0) + "/current_vgpu_type"
	k.InjectFault(simkernel.Fault{Path: p, Errno: syscall.EIO})
	err := nvvf.SetType(k, vf0, q4)
	if !errors.Is(err, syscall.EIO) || !strings.HasPrefix(err.Error(), "set vGPU type ") || !strings.Contains(err.Error(), p) {
		t.Fatalf("SetType with a fault = %v", err)
	}
	if _, cur := read(t, k, vf0); cur != 0 {
		t.Fatalf("current %d after a failed SetType", cur)
	}
	if err := nvvf.SetType(k, vf0, q4); err != nil {
		t.Fatal(err)
	}
	k.InjectFault(simkernel.Fault{Path: p, Errno: syscall.EIO})
	if err := nvvf.ClearType(k, vf0); !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "clear the vGPU type of 0000:41:00.4") {
		t.Fatalf("ClearType with a fault = %v", err)
	}
}
