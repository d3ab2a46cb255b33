package pci_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

var (
	plainAddr = pci.MustParseAddress("0000:03:00.0")
	sriovAddr = pci.MustParseAddress("0000:05:00.0")
	l40sAddr  = pci.MustParseAddress("0000:41:00.0")
	nvmeAddr  = pci.MustParseAddress("0000:07:00.0")
	missing   = pci.MustParseAddress("0000:99:00.0")
)

// newHost boots a fake kernel with a passthrough-only GPU (nouveau), an
// MI25 (a generic SR-IOV PF driver, VFs land on pci-stub), an L40S (nvidia, per-VF types) and a
// QEMU NVMe on NUMA node 1.
func newHost(t *testing.T) *simkernel.Kernel {
	t.Helper()
	k, err := simkernel.New(simkernel.Host{Version: "v1", NUMANodes: 2, GPUs: []simkernel.HostGPU{
		{Model: "plain", Address: plainAddr, NUMANode: 0},
		{Model: "mi25", Address: sriovAddr, NUMANode: -1},
		{Model: "l40s", Address: l40sAddr, NUMANode: 1},
		{Model: "qemu-nvme", Address: nvmeAddr, NUMANode: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustDriver(t *testing.T, f sysfs.FS, a pci.Address, want string) {
	t.Helper()
	got, err := pci.CurrentDriver(f, a)
	if err != nil {
		t.Fatalf("CurrentDriver(%s): %v", a, err)
	}
	if got != want {
		t.Fatalf("%s is on %q, want %q", a, got, want)
	}
}

func mustOverride(t *testing.T, f sysfs.FS, a pci.Address, want string) {
	t.Helper()
	got, err := pci.DriverOverride(f, a)
	if err != nil {
		t.Fatalf("DriverOverride(%s): %v", a, err)
	}
	if got != want {
		t.Fatalf("override of %s = %q, want %q", a, got, want)
	}
}

// mustSay checks that err's message says each of wants.
func mustSay(t *testing.T, err error, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
}

func exists(t *testing.T, f sysfs.FS, p string) bool {
	t.Helper()
	ok, err := sysfs.Exists(f, p)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func vfioNode(t *testing.T, f sysfs.FS, a pci.Address) string {
	t.Helper()
	g, ok, err := pci.IOMMUGroup(f, a)
	if err != nil || !ok {
		t.Fatalf("IOMMUGroup(%s) = %d, %v, %v", a, g, ok, err)
	}
	return pci.GroupDevicePath(g)
}

func TestDevicePath(t *testing.T) {
	if got := pci.DevicePath(plainAddr); got != "/sys/bus/pci/devices/0000:03:00.0" {
		t.Fatalf("DevicePath = %q", got)
	}
	if got := pci.DriverPath("vfio-pci"); got != "/sys/bus/pci/drivers/vfio-pci" {
		t.Fatalf("DriverPath = %q", got)
	}
}

func TestCurrentDriver(t *testing.T) {
	k := newHost(t)
	mustDriver(t, k, plainAddr, "nouveau")
	mustDriver(t, k, sriovAddr, "sriov-standin")
	_, err := pci.CurrentDriver(k, missing)
	if !errors.Is(err, pci.ErrNoDevice) || !strings.Contains(err.Error(), "/sys/bus/pci/devices/0000:99:00.0") {
		t.Fatalf("CurrentDriver(missing) = %v, want ErrNoDevice naming the path", err)
	}

	k2, err := simkernel.New(simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{
		{Model: "plain", Address: plainAddr, Driver: simkernel.DriverNone},
	}})
	if err != nil {
		t.Fatal(err)
	}
	mustDriver(t, k2, plainAddr, "")
}

func TestSetDriverOverride(t *testing.T) {
	k := newHost(t)
	mustOverride(t, k, plainAddr, "") // the kernel prints "(null)"
	if err := pci.SetDriverOverride(k, plainAddr, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	mustOverride(t, k, plainAddr, "vfio-pci")
	// Only the next probe looks at the override.
	mustDriver(t, k, plainAddr, "nouveau")
	if err := pci.SetDriverOverride(k, plainAddr, ""); err != nil {
		t.Fatal(err)
	}
	mustOverride(t, k, plainAddr, "")
	if n := k.Writes(pci.DevicePath(plainAddr) + "/driver_override"); n != 2 {
		t.Fatalf("%d writes to driver_override, want 2 (an empty write would not reach the kernel)", n)
	}

	err := pci.SetDriverOverride(k, missing, "vfio-pci")
	if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "set driver override \"vfio-pci\" for 0000:99:00.0 via /sys/bus/pci/devices/0000:99:00.0/driver_override") {
		t.Fatalf("SetDriverOverride(missing) = %v", err)
	}
}

func TestUnbind(t *testing.T) {
	k := newHost(t)
	if err := pci.Unbind(k, plainAddr); err != nil {
		t.Fatal(err)
	}
	mustDriver(t, k, plainAddr, "")
	if exists(t, k, "/sys/bus/pci/drivers/nouveau/0000:03:00.0") {
		t.Fatal("the driver still lists the device")
	}
	unbind := "/sys/bus/pci/drivers/nouveau/unbind"
	before := k.Writes(unbind)
	if err := pci.Unbind(k, plainAddr); err != nil {
		t.Fatalf("Unbind of an unbound device: %v", err)
	}
	if k.Writes(unbind) != before {
		t.Fatal("Unbind wrote to a driver although the device was unbound")
	}
	if err := pci.Unbind(k, missing); !errors.Is(err, pci.ErrNoDevice) {
		t.Fatalf("Unbind(missing) = %v, want ErrNoDevice", err)
	}

	k.InjectFault(simkernel.Fault{Path: "/sys/bus/pci/drivers/sriov-standin/unbind", Errno: syscall.EBUSY})
	err := pci.Unbind(k, sriovAddr)
	if !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "unbind 0000:05:00.0 from sriov-standin via /sys/bus/pci/drivers/sriov-standin/unbind") {
		t.Fatalf("Unbind with a fault = %v", err)
	}
	mustDriver(t, k, sriovAddr, "sriov-standin")
}

func TestBindToVFIOAndBack(t *testing.T) {
	k := newHost(t)
	ctx := context.Background()
	node := vfioNode(t, k, plainAddr)
	if exists(t, k, node) {
		t.Fatalf("%s exists before binding to vfio-pci", node)
	}
	if err := pci.Bind(ctx, k, plainAddr, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	mustDriver(t, k, plainAddr, "vfio-pci")
	mustOverride(t, k, plainAddr, "vfio-pci") // kept so a rescan cannot hand it back
	if !exists(t, k, node) {
		t.Fatalf("%s missing after binding to vfio-pci", node)
	}
	if !exists(t, k, "/sys/bus/pci/drivers/vfio-pci/0000:03:00.0") {
		t.Fatal("vfio-pci does not list the device")
	}

	// Already there: nothing is written.
	probes := k.Writes(sysfs.PCIDriversProbe)
	overrides := k.Writes(pci.DevicePath(plainAddr) + "/driver_override")
	if err := pci.Bind(ctx, k, plainAddr, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	if k.Writes(sysfs.PCIDriversProbe) != probes || k.Writes(pci.DevicePath(plainAddr)+"/driver_override") != overrides {
		t.Fatal("Bind to the current driver wrote to the kernel")
	}

	if err := pci.Bind(ctx, k, plainAddr, "nouveau"); err != nil {
		t.Fatal(err)
	}
	mustDriver(t, k, plainAddr, "nouveau")
	if exists(t, k, node) {
		t.Fatalf("%s still exists after leaving vfio-pci", node)
	}
}

func TestBindUnboundDevice(t *testing.T) {
	k, err := simkernel.New(simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{
		{Model: "plain", Address: plainAddr, Driver: simkernel.DriverNone},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pci.Bind(context.Background(), k, plainAddr, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	mustDriver(t, k, plainAddr, "vfio-pci")
}

func TestBindVF(t *testing.T) {
	k := newHost(t)
	if err := sriov.SetNumVFs(k, sriovAddr, 2); err != nil {
		t.Fatal(err)
	}
	vfs, err := sriov.VFs(k, sriovAddr)
	if err != nil || len(vfs) != 2 {
		t.Fatalf("VFs = %v, %v", vfs, err)
	}
	vf := vfs[1].Address
	mustDriver(t, k, vf, "pci-stub") // GIM hosts claim the VFs with pci-stub.ids=
	mustOverride(t, k, vf, "")
	if err := pci.Bind(context.Background(), k, vf, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	mustDriver(t, k, vf, "vfio-pci")
	mustDriver(t, k, vfs[0].Address, "pci-stub")
	if !exists(t, k, vfioNode(t, k, vf)) {
		t.Fatal("no /dev/vfio node for the VF")
	}
}

func TestBindRefusals(t *testing.T) {
	k := newHost(t)
	ctx := context.Background()
	probes := k.Writes(sysfs.PCIDriversProbe)

	err := pci.Bind(ctx, k, plainAddr, "no-such-driver")
	if !errors.Is(err, pci.ErrNoDriver) || !strings.Contains(err.Error(), "/sys/bus/pci/drivers/no-such-driver") {
		t.Fatalf("Bind to an unloaded driver = %v", err)
	}
	mustDriver(t, k, plainAddr, "nouveau") // not unbound first
	if err := pci.Bind(ctx, k, missing, "vfio-pci"); !errors.Is(err, pci.ErrNoDevice) {
		t.Fatalf("Bind(missing) = %v, want ErrNoDevice", err)
	}
	for _, bad := range []string{"", "../vfio-pci", "vfio-pci\n"} {
		if err := pci.Bind(ctx, k, plainAddr, bad); err == nil {
			t.Fatalf("Bind to %q succeeded", bad)
		}
	}
	if k.Writes(sysfs.PCIDriversProbe) != probes {
		t.Fatal("a refused Bind probed")
	}
}

// A VF of a per-VF-type NVIDIA GPU refuses vfio-pci (docs/vendors/nvidia.md): the probe
// is accepted, nothing binds, and Bind must put the VF back on nvidia with
// its nvidia/ directory.
func TestBindFailureRestores(t *testing.T) {
	k := newHost(t)
	if err := sysfstest.EnableVFs(k, l40sAddr.String(), 0); err != nil {
		t.Fatal(err)
	}
	vf := pci.MustParseAddress("0000:41:00.4")
	mustDriver(t, k, vf, "nvidia")

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := pci.Bind(ctx, k, vf, "vfio-pci")
	if err == nil {
		t.Fatal("Bind of an L40S VF to vfio-pci succeeded")
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("Bind ignored its context: took %v", time.Since(start))
	}
	if !errors.Is(err, pci.ErrBindTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want ErrBindTimeout and the context's error", err)
	}
	mustSay(t, err, "bind 0000:41:00.4 to vfio-pci", "/sys/bus/pci/devices/0000:41:00.4/driver")
	mustDriver(t, k, vf, "nvidia")
	mustOverride(t, k, vf, "")
	if !exists(t, k, pci.DevicePath(vf)+"/nvidia/current_vgpu_type") {
		t.Fatal("the VF's nvidia/ directory did not come back")
	}
}

func TestBindProbeFault(t *testing.T) {
	k := newHost(t)
	k.InjectFault(simkernel.Fault{Path: sysfs.PCIDriversProbe, Errno: syscall.EIO})
	err := pci.Bind(context.Background(), k, plainAddr, "vfio-pci")
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("Bind with a failing probe = %v, want EIO", err)
	}
	mustSay(t, err, "bind 0000:03:00.0 to vfio-pci", "probe 0000:03:00.0 via /sys/bus/pci/drivers_probe")
	mustDriver(t, k, plainAddr, "nouveau")
	mustOverride(t, k, plainAddr, "")
}

func TestBindOverrideFault(t *testing.T) {
	k := newHost(t)
	if err := pci.SetDriverOverride(k, plainAddr, "nouveau"); err != nil {
		t.Fatal(err)
	}
	k.InjectFault(simkernel.Fault{Path: pci.DevicePath(plainAddr) + "/driver_override", Errno: syscall.ENOMEM})
	err := pci.Bind(context.Background(), k, plainAddr, "vfio-pci")
	if !errors.Is(err, syscall.ENOMEM) || !strings.Contains(err.Error(), "driver_override") {
		t.Fatalf("Bind = %v, want ENOMEM naming driver_override", err)
	}
	mustDriver(t, k, plainAddr, "nouveau")
	mustOverride(t, k, plainAddr, "nouveau") // the old override, not a cleared one
}

func TestBindRestoreFails(t *testing.T) {
	k := newHost(t)
	k.InjectFault(simkernel.Fault{Path: sysfs.PCIDriversProbe, Errno: syscall.EIO, Always: true})
	err := pci.Bind(context.Background(), k, plainAddr, "vfio-pci")
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "restoring it failed too") {
		t.Fatalf("Bind = %v, want EIO and the failed restore", err)
	}
	mustDriver(t, k, plainAddr, "") // the truth: it is left unbound, and the error says so
}

func TestReadIDsAndNUMA(t *testing.T) {
	k := newHost(t)
	v, d, c, err := pci.ReadIDs(k, l40sAddr)
	if err != nil || v != 0x10de || d != 0x26b9 || c != 0x030200 {
		t.Fatalf("ReadIDs(l40s) = %04x %04x %06x %v", v, d, c, err)
	}
	if _, _, _, err := pci.ReadIDs(k, missing); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("ReadIDs(missing) = %v", err)
	}
	for a, want := range map[pci.Address]int{l40sAddr: 1, plainAddr: 0, sriovAddr: -1, missing: -1} {
		n, err := pci.NUMANode(k, a)
		if err != nil || n != want {
			t.Errorf("NUMANode(%s) = %d, %v; want %d", a, n, err, want)
		}
	}
}

func TestBindCancelled(t *testing.T) {
	k := newHost(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	probes := k.Writes(sysfs.PCIDriversProbe)
	if err := pci.Bind(ctx, k, plainAddr, "vfio-pci"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Bind with a cancelled context = %v", err)
	}
	if k.Writes(sysfs.PCIDriversProbe) != probes {
		t.Fatal("a cancelled Bind probed")
	}
	mustDriver(t, k, plainAddr, "nouveau")
}
