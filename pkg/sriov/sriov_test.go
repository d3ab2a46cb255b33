package sriov_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/pci/pcitest"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

var (
	mi25    = pci.MustParseAddress("0000:03:00.0")
	plain   = pci.MustParseAddress("0000:06:00.0")
	nvme    = pci.MustParseAddress("0000:08:00.0")
	missing = pci.MustParseAddress("0000:99:00.0")
)

func newKernel(t *testing.T, gpus ...simkernel.HostGPU) *simkernel.Kernel {
	t.Helper()
	if len(gpus) == 0 {
		gpus = []simkernel.HostGPU{
			{Model: "mi25", Address: mi25},
			{Model: "plain", Address: plain},
			{Model: "qemu-nvme", Address: nvme},
		}
	}
	k, err := simkernel.New(simkernel.Host{Version: "v1", GPUs: gpus})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// setNumVFs gives pf n VFs with SetNumVFs; an error ends the test.
func setNumVFs(t *testing.T, f sysfs.FS, pf pci.Address, n int) {
	t.Helper()
	if err := sriov.SetNumVFs(f, pf, n); err != nil {
		t.Fatalf("SetNumVFs %s %d: %v", pf, n, err)
	}
}

func numVFs(t *testing.T, f sysfs.FS, pf pci.Address) int {
	t.Helper()
	n, err := sriov.NumVFs(f, pf)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func numvfsPath(pf pci.Address) string { return pci.DevicePath(pf) + "/sriov_numvfs" }

func TestCapability(t *testing.T) {
	k := newKernel(t)
	if ok, err := sriov.IsPF(k, mi25); err != nil || !ok {
		t.Fatalf("IsPF(mi25) = %v, %v", ok, err)
	}
	if ok, err := sriov.IsPF(k, plain); err != nil || ok {
		t.Fatalf("IsPF(plain) = %v, %v", ok, err)
	}
	if n, err := sriov.TotalVFs(k, mi25); err != nil || n != 16 {
		t.Fatalf("TotalVFs = %d, %v", n, err)
	}
	if n := numVFs(t, k, mi25); n != 0 {
		t.Fatalf("NumVFs after boot = %d", n)
	}
	if id, err := sriov.VFDeviceID(k, mi25); err != nil || id != 0x686c {
		t.Fatalf("VFDeviceID = %04x, %v", id, err)
	}
	if vfs, err := sriov.VFs(k, mi25); err != nil || len(vfs) != 0 {
		t.Fatalf("VFs before enabling = %v, %v", vfs, err)
	}

	_, err := sriov.TotalVFs(k, plain)
	if !errors.Is(err, sriov.ErrNotPF) || !strings.Contains(err.Error(), "0000:06:00.0") {
		t.Fatalf("TotalVFs(plain) = %v, want ErrNotPF naming it", err)
	}
	if _, err := sriov.NumVFs(k, missing); !errors.Is(err, pci.ErrNoDevice) {
		t.Fatalf("NumVFs(missing) = %v, want ErrNoDevice", err)
	}
	for name, fn := range map[string]func() error{
		"VFDeviceID":   func() error { _, err := sriov.VFDeviceID(k, plain); return err },
		"VFs":          func() error { _, err := sriov.VFs(k, plain); return err },
		"Autoprobe":    func() error { _, err := sriov.Autoprobe(k, plain); return err },
		"SetAutoprobe": func() error { return sriov.SetAutoprobe(k, plain, false) },
		"SetNumVFs":    func() error { return sriov.SetNumVFs(k, plain, 1) },
	} {
		if err := fn(); !errors.Is(err, sriov.ErrNotPF) {
			t.Errorf("%s on a non-PF = %v, want ErrNotPF", name, err)
		}
	}
}

func TestEnableListDisable(t *testing.T) {
	k := newKernel(t)
	setNumVFs(t, k, mi25, 4)
	if n := numVFs(t, k, mi25); n != 4 {
		t.Fatalf("NumVFs = %d, want 4", n)
	}
	vfs, err := sriov.VFs(k, mi25)
	if err != nil || len(vfs) != 4 {
		t.Fatalf("VFs = %v, %v", vfs, err)
	}
	for i, vf := range vfs {
		want := pci.Address{Bus: 3, Function: uint8(i + 1)} // offset 1, stride 1
		if vf.Index != i || vf.Address != want {
			t.Errorf("VF %d = %+v, want index %d at %s", i, vf, i, want)
		}
		pf, ok, err := sriov.PhysFn(k, vf.Address)
		if err != nil || !ok || pf != mi25 {
			t.Errorf("PhysFn(%s) = %s, %v, %v", vf.Address, pf, ok, err)
		}
		// Each VF is its own device, with its own IOMMU group (measured).
		if _, ok, err := pci.IOMMUGroup(k, vf.Address); !ok || err != nil {
			t.Errorf("VF %s has no IOMMU group: %v", vf.Address, err)
		}
	}
	if _, ok, err := sriov.PhysFn(k, mi25); ok || err != nil {
		t.Fatalf("PhysFn(PF) = %v, %v; want not a VF", ok, err)
	}

	// The same count again writes nothing.
	w := k.Writes(numvfsPath(mi25))
	setNumVFs(t, k, mi25, 4)
	if k.Writes(numvfsPath(mi25)) != w {
		t.Fatal("setting the current count wrote to sriov_numvfs")
	}

	// 4 -> 2 goes through 0, as the kernel demands.
	setNumVFs(t, k, mi25, 2)
	if got := k.Writes(numvfsPath(mi25)) - w; got != 2 {
		t.Fatalf("%d writes for 4 -> 2, want 2 (0, then 2)", got)
	}
	if vfs, _ := sriov.VFs(k, mi25); len(vfs) != 2 || vfs[1].Index != 1 {
		t.Fatalf("VFs after 4 -> 2 = %v", vfs)
	}
	if ok, _ := sysfs.Exists(k, pci.DevicePath(mi25)+"/virtfn3"); ok {
		t.Fatal("virtfn3 survived")
	}

	setNumVFs(t, k, mi25, 0)
	if n := numVFs(t, k, mi25); n != 0 {
		t.Fatalf("NumVFs after disabling = %d", n)
	}
	if ok, _ := pci.Exists(k, pci.MustParseAddress("0000:03:00.1")); ok {
		t.Fatal("VF device survived disabling")
	}
}

func TestSetNumVFsValidation(t *testing.T) {
	k := newKernel(t)
	w := k.Writes(numvfsPath(mi25))
	err := sriov.SetNumVFs(k, mi25, 17)
	if !errors.Is(err, syscall.ERANGE) || !strings.Contains(err.Error(), "0000:03:00.0 supports at most 16 VFs") {
		t.Fatalf("SetNumVFs(17) = %v", err)
	}
	if !strings.HasPrefix(err.Error(), "enable 17 VFs on 0000:03:00.0 via /sys/bus/pci/devices/0000:03:00.0/sriov_numvfs: ") {
		t.Fatalf("SetNumVFs(17) does not name action and path: %v", err)
	}
	if err := sriov.SetNumVFs(k, mi25, -1); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("SetNumVFs(-1) = %v", err)
	}
	if k.Writes(numvfsPath(mi25)) != w {
		t.Fatal("a refused count reached the kernel")
	}
	if err := sriov.SetNumVFs(k, missing, 1); !errors.Is(err, pci.ErrNoDevice) {
		t.Fatalf("SetNumVFs(missing) = %v", err)
	}
}

func TestSetNumVFsNoDriver(t *testing.T) {
	k := newKernel(t, simkernel.HostGPU{Model: "mi25", Address: mi25, Driver: simkernel.DriverNone})
	err := sriov.SetNumVFs(k, mi25, 4)
	want := "enable 4 VFs on 0000:03:00.0 via /sys/bus/pci/devices/0000:03:00.0/sriov_numvfs: " +
		"no driver bound to 0000:03:00.0; cannot configure SR-IOV (bind its vendor driver first)"
	if !errors.Is(err, syscall.ENOENT) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("SetNumVFs without a driver = %v\nwant %s", err, want)
	}
	if k.Writes(numvfsPath(mi25)) != 1 {
		t.Fatal("the kernel was not asked")
	}
}

func TestSetNumVFsPFOnVFIO(t *testing.T) {
	k := newKernel(t)
	if err := pci.Bind(context.Background(), k, mi25, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	err := sriov.SetNumVFs(k, mi25, 2)
	if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "enable_sriov=Y") {
		t.Fatalf("SetNumVFs with the PF on vfio-pci = %v", err)
	}
}

func TestSetNumVFsKernelErrors(t *testing.T) {
	for _, c := range []struct {
		errno syscall.Errno
		says  string
	}{
		{syscall.EBUSY, "is busy"},
		{syscall.EINVAL, "rejected 2"},
		{syscall.EACCES, "permission denied"},
		{syscall.ENOMEM, "failed to configure SR-IOV"},
		{syscall.ERANGE, "supports at most 16 VFs"},
	} {
		k := newKernel(t)
		k.InjectFault(simkernel.Fault{Path: numvfsPath(mi25), Errno: c.errno})
		err := sriov.SetNumVFs(k, mi25, 2)
		if !errors.Is(err, c.errno) || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), numvfsPath(mi25)) {
			t.Errorf("%v: SetNumVFs = %v, want %q with the path", c.errno, err, c.says)
		}
		if n := numVFs(t, k, mi25); n != 0 {
			t.Errorf("%v: %d VFs after a failed enable", c.errno, n)
		}
	}
}

func TestSetNumVFsDisableFails(t *testing.T) {
	k := newKernel(t)
	setNumVFs(t, k, mi25, 4)
	k.InjectFault(simkernel.Fault{Path: numvfsPath(mi25), Errno: syscall.EBUSY})
	err := sriov.SetNumVFs(k, mi25, 8)
	if !errors.Is(err, syscall.EBUSY) || !strings.HasPrefix(err.Error(), "disable the 4 VFs of 0000:03:00.0 via ") {
		t.Fatalf("SetNumVFs 4 -> 8 with a failing disable = %v", err)
	}
	if n := numVFs(t, k, mi25); n != 4 {
		t.Fatalf("%d VFs, want the 4 untouched", n)
	}
}

func TestSetNumVFsReenablesOnFailure(t *testing.T) {
	k := newKernel(t)
	setNumVFs(t, k, mi25, 4)
	// The disable goes through; the enable of 8 fails.
	k.InjectFault(simkernel.Fault{Path: numvfsPath(mi25), Nth: 2, Errno: syscall.ENOMEM})
	err := sriov.SetNumVFs(k, mi25, 8)
	if !errors.Is(err, syscall.ENOMEM) || !strings.Contains(err.Error(), "the previous 4 VFs were re-enabled") {
		t.Fatalf("SetNumVFs 4 -> 8 = %v", err)
	}
	if n := numVFs(t, k, mi25); n != 4 {
		t.Fatalf("%d VFs after the failed change, want 4 back", n)
	}

	k.InjectFault(simkernel.Fault{Path: numvfsPath(mi25), Nth: 2, Errno: syscall.ENOMEM, Always: true})
	err = sriov.SetNumVFs(k, mi25, 8)
	if !errors.Is(err, syscall.ENOMEM) || !strings.Contains(err.Error(), "re-enabling the previous 4 VFs failed too") {
		t.Fatalf("SetNumVFs 4 -> 8 with no way back = %v", err)
	}
	if n := numVFs(t, k, mi25); n != 0 {
		t.Fatalf("%d VFs, want 0 as the error says", n)
	}
}

func TestAutoprobe(t *testing.T) {
	k := newKernel(t)
	on, err := sriov.Autoprobe(k, nvme)
	if err != nil || !on {
		t.Fatalf("Autoprobe after boot = %v, %v", on, err)
	}
	// With autoprobe the PF's own driver grabs the VFs and fails (measured
	// with nvme): the VFs end up on no driver.
	setNumVFs(t, k, nvme, 2)
	vfs, _ := sriov.VFs(k, nvme)
	if drv, _ := pci.CurrentDriver(k, vfs[0].Address); drv != "" {
		t.Fatalf("nvme VF on %q", drv)
	}

	if err := sriov.SetAutoprobe(k, mi25, false); err != nil {
		t.Fatal(err)
	}
	if on, err := sriov.Autoprobe(k, mi25); err != nil || on {
		t.Fatalf("Autoprobe after SetAutoprobe(false) = %v, %v", on, err)
	}
	setNumVFs(t, k, mi25, 2)
	vfs, _ = sriov.VFs(k, mi25)
	if drv, _ := pci.CurrentDriver(k, vfs[0].Address); drv != "" {
		t.Fatalf("with autoprobe off the VF went to %q", drv)
	}
	// With it on, the pci-stub ids claim new MI25 VFs.
	setNumVFs(t, k, mi25, 0)
	if err := sriov.SetAutoprobe(k, mi25, true); err != nil {
		t.Fatal(err)
	}
	setNumVFs(t, k, mi25, 1)
	vfs, _ = sriov.VFs(k, mi25)
	if drv, _ := pci.CurrentDriver(k, vfs[0].Address); drv != "pci-stub" {
		t.Fatalf("with autoprobe on the VF is on %q, want pci-stub", drv)
	}

	k.InjectFault(simkernel.Fault{Path: pci.DevicePath(mi25) + "/sriov_drivers_autoprobe", Errno: syscall.EPERM})
	err = sriov.SetAutoprobe(k, mi25, false)
	if !errors.Is(err, syscall.EPERM) || !strings.Contains(err.Error(), "sriov_drivers_autoprobe") {
		t.Fatalf("SetAutoprobe with a fault = %v", err)
	}
}

// Disabling waits while a VM holds a VF, as the kernel does; it completes
// once the VM lets go.
func TestDisableWaitsForUser(t *testing.T) {
	k := newKernel(t)
	setNumVFs(t, k, mi25, 2)
	vfs, _ := sriov.VFs(k, mi25)
	if err := pci.Bind(context.Background(), k, vfs[0].Address, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	g, _, _ := pci.IOMMUGroup(k, vfs[0].Address)
	h, err := k.OpenDevice(pci.GroupDevicePath(g))
	if err != nil {
		t.Fatal(err)
	}
	pcitest.BlocksUntilReleased(t, "disable", h, func() error { return sriov.SetNumVFs(k, mi25, 0) })
	if n := numVFs(t, k, mi25); n != 0 {
		t.Fatalf("%d VFs after disable", n)
	}
}

// noOffset is a kernel before 4.15: no sriov_offset or sriov_stride.
type noOffset struct{ sysfs.FS }

func (f noOffset) ReadFile(name string) ([]byte, error) {
	if strings.HasSuffix(name, "/sriov_offset") || strings.HasSuffix(name, "/sriov_stride") {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ENOENT}
	}
	return f.FS.ReadFile(name)
}

// TestVFAddresses: the addresses computed before any VF exists are the
// ones the kernel gives the VFs when they are enabled, carrying from the
// function into the device number (16 VFs from 03:00.1 end at 03:02.0).
func TestVFAddresses(t *testing.T) {
	k := newKernel(t)
	addrs, ok, err := sriov.VFAddresses(k, mi25)
	if err != nil || !ok || len(addrs) != 16 {
		t.Fatalf("VFAddresses(mi25) = %v, %v, %v; want 16", addrs, ok, err)
	}
	if last := pci.MustParseAddress("0000:03:02.0"); addrs[15] != last {
		t.Errorf("VF 15 at %s, want %s", addrs[15], last)
	}
	setNumVFs(t, k, mi25, 16)
	vfs, err := sriov.VFs(k, mi25)
	if err != nil || len(vfs) != 16 {
		t.Fatalf("VFs = %v, %v", vfs, err)
	}
	for _, vf := range vfs {
		if addrs[vf.Index] != vf.Address {
			t.Errorf("VF %d: computed %s, the kernel made %s", vf.Index, addrs[vf.Index], vf.Address)
		}
	}

	// Without the attributes only the enabled VFs are known.
	setNumVFs(t, k, mi25, 2)
	got, ok, err := sriov.VFAddresses(noOffset{k}, mi25)
	if err != nil || ok || len(got) != 2 || got[0] != addrs[0] || got[1] != addrs[1] {
		t.Errorf("VFAddresses without sriov_offset = %v, %v, %v; want the 2 enabled, not ok", got, ok, err)
	}
	if _, _, err := sriov.VFAddresses(k, plain); !errors.Is(err, sriov.ErrNotPF) {
		t.Errorf("VFAddresses(plain) = %v, want ErrNotPF", err)
	}
}
