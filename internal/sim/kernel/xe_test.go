package simkernel

import (
	"context"
	"strconv"
	"syscall"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

const b50Addr = "0000:05:00.0"

func xeHost(t *testing.T, maxVFs *int, admin string) *Kernel {
	t.Helper()
	return NewFor(t, Host{GPUs: []HostGPU{{Model: ModelArcB50, Address: pci.MustParseAddress(b50Addr)}}, XeMaxVFs: maxVFs, XeAdmin: admin})
}

// TestXeSRIOVAdmin: xe's PF on Linux 6.19+: sriov_numvfs as any PF, and
// sriov_admin/ as xe_sriov_pf_sysfs.c builds it and the ABI document
// describes it.
func TestXeSRIOVAdmin(t *testing.T) {
	k := xeHost(t, nil, "")
	if d := driverOf(k, b50Addr); d != DrvXe {
		t.Fatalf("B50 on %q", d)
	}
	if got := read(t, k, "/sys/module/xe/parameters/max_vfs"); got != "4294967295\n" {
		t.Fatalf("max_vfs = %q", got)
	}
	admin := devPath(b50Addr, "sriov_admin/")
	// Every VF the PF can have has its directory before any is enabled.
	wantExists(t, k, admin+"vf16/profile/exec_quantum_ms", true)
	wantExists(t, k, admin+"vf17", false)
	wantExists(t, k, admin+"vf1/device", false)
	if got := linkBase(t, k, admin+"pf/device"); got != b50Addr {
		t.Fatalf("pf/device -> %s", got)
	}
	eq := admin + "vf1/profile/exec_quantum_ms"
	if got := read(t, k, eq); got != "0\n" {
		t.Fatalf("exec_quantum_ms = %q, want 0 (unlimited)", got)
	}
	if got := read(t, k, admin+"vf1/profile/sched_priority"); got != "[low] normal\n" {
		t.Fatalf("VF sched_priority = %q", got)
	}
	if got := read(t, k, admin+"pf/profile/sched_priority"); got != "[low] normal high\n" {
		t.Fatalf("PF sched_priority = %q", got)
	}
	// A VF's priority is read-only (0444: the GuC changes it in bulk only),
	// the bulk files write-only.
	writeErr(t, k, admin+"vf1/profile/sched_priority", "normal", syscall.EACCES)
	if _, err := k.ReadFile(admin + ".bulk_profile/sched_priority"); err == nil {
		t.Fatal("read a write-only bulk file")
	}
	writeErr(t, k, admin+".bulk_profile/sched_priority", "high", syscall.EINVAL)
	write(t, k, admin+".bulk_profile/sched_priority", "normal\n")
	if got := read(t, k, admin+"vf3/profile/sched_priority"); got != "low [normal]\n" {
		t.Fatalf("VF sched_priority after bulk normal = %q", got)
	}
	write(t, k, admin+"pf/profile/sched_priority", "high")
	writeErr(t, k, eq, "-1", syscall.EINVAL)
	writeErr(t, k, eq, "4294967296", syscall.ERANGE)
	write(t, k, eq, "0x10")

	// Enable: links appear; the configuration written before stays.
	write(t, k, devPath(b50Addr, "sriov_drivers_autoprobe"), "0")
	write(t, k, devPath(b50Addr, "sriov_numvfs"), "4")
	if got := linkBase(t, k, admin+"vf4/device"); got != "0000:05:00.4" {
		t.Fatalf("vf4/device -> %s", got)
	}
	wantExists(t, k, admin+"vf5/device", false)
	if got := read(t, k, eq); got != "16\n" {
		t.Fatalf("exec_quantum_ms after enabling = %q", got)
	}
	writeErr(t, k, devPath(b50Addr, "sriov_numvfs"), "17", syscall.ERANGE)
	writeErr(t, k, devPath(b50Addr, "sriov_numvfs"), "2", syscall.EBUSY)
	// stop stops the VF until its FLR: a second stop is ESTALE, false
	// does nothing, and after the VF's reset it stops again.
	write(t, k, admin+"vf2/stop", "1")
	writeErr(t, k, admin+"vf2/stop", "1", syscall.ESTALE)
	write(t, k, admin+"vf2/stop", "0")
	writeErr(t, k, admin+"vf2/stop", "maybe", syscall.EINVAL)
	write(t, k, devPath("0000:05:00.2", "reset"), "1")
	write(t, k, admin+"vf2/stop", "y")
	writeErr(t, k, admin+"vf2/stop", "1", syscall.ESTALE)
	// Disable: every VF's configuration is released and reset.
	write(t, k, devPath(b50Addr, "sriov_numvfs"), "0")
	wantExists(t, k, admin+"vf1/device", false)
	if got := read(t, k, eq); got != "0\n" {
		t.Fatalf("exec_quantum_ms after disabling = %q, want reset to 0", got)
	}
	if got := read(t, k, admin+"vf1/profile/sched_priority"); got != "low [normal]\n" {
		t.Fatalf("VF priority after disabling = %q, want kept (one setting for all VFs)", got)
	}
	// xe unbound: no sriov_admin.
	write(t, k, devPath(b50Addr, "driver/unbind"), b50Addr)
	wantExists(t, k, devPath(b50Addr, "sriov_admin"), false)
}

// TestXeWithoutPFMode: with xe.max_vfs=0 xe runs the GPU as a plain
// device: sriov_configure answers ENODEV and there is no sriov_admin/; a
// max_vfs below the hardware's caps sriov_totalvfs.
func TestXeWithoutPFMode(t *testing.T) {
	zero, four := 0, 4
	k := xeHost(t, &zero, "")
	if got := read(t, k, "/sys/module/xe/parameters/max_vfs"); got != "0\n" {
		t.Fatalf("max_vfs = %q", got)
	}
	writeErr(t, k, devPath(b50Addr, "sriov_numvfs"), "2", syscall.ENODEV)
	wantExists(t, k, devPath(b50Addr, "sriov_admin"), false)
	if got := read(t, k, devPath(b50Addr, "sriov_totalvfs")); got != "16\n" {
		t.Fatalf("sriov_totalvfs = %q", got)
	}
	k = xeHost(t, &four, "")
	if got := read(t, k, devPath(b50Addr, "sriov_totalvfs")); got != "4\n" {
		t.Fatalf("sriov_totalvfs with max_vfs=4 = %q", got)
	}
	wantExists(t, k, devPath(b50Addr, "sriov_admin/vf4"), true)
	wantExists(t, k, devPath(b50Addr, "sriov_admin/vf5"), false)
	// Before Linux 6.19: PF mode without sriov_admin.
	k = xeHost(t, nil, XeAdminNone)
	wantExists(t, k, devPath(b50Addr, "sriov_admin"), false)
	write(t, k, devPath(b50Addr, "sriov_numvfs"), "2")
}

// TestXeVRAMQuota: Linux 7.0's vram_quota as xe_sriov_pf_sysfs.c and
// pf_provision_vf_lmem handle it: bytes rounded up to 2 MiB, allocated at
// the store whether the VFs exist or not, refused past the free VRAM;
// pinned VRAM blocks auto-provisioning; disabling releases it all.
func TestXeVRAMQuota(t *testing.T) {
	k := xeHost(t, nil, XeAdmin70)
	admin := devPath(b50Addr, "sriov_admin/")
	q := func(n int) string { return admin + "vf" + strconv.Itoa(n) + "/profile/vram_quota" }
	// Not for the PF; 0 (unprovisioned) before the VFs are enabled.
	wantExists(t, k, admin+"pf/profile/vram_quota", false)
	if got := read(t, k, q(1)); got != "0\n" {
		t.Fatalf("vf1 vram_quota = %q", got)
	}
	// Auto-provisioning: (free - 128 MiB spare) / n, down to 2 MiB.
	write(t, k, devPath(b50Addr, "sriov_drivers_autoprobe"), "0")
	write(t, k, devPath(b50Addr, "sriov_numvfs"), "3")
	free := uint64(16384-2160) << 20
	fair := (free - 128<<20) / 3 / (2 << 20) * (2 << 20)
	if got := read(t, k, q(3)); got != strconv.FormatUint(fair, 10)+"\n" {
		t.Fatalf("auto-provisioned vf3 = %q, want %d", got, fair)
	}
	write(t, k, devPath(b50Addr, "sriov_numvfs"), "0")
	if got := read(t, k, q(3)); got != "0\n" {
		t.Fatalf("vf3 after disabling = %q, want released", got)
	}
	// Pinned before enabling: rounded up, kept, no auto-provisioning for
	// the others.
	write(t, k, q(1), "1000000000")
	if got := read(t, k, q(1)); got != "1000341504\n" { // 477 x 2 MiB
		t.Fatalf("vf1 pinned = %q", got)
	}
	writeErr(t, k, q(2), "4G", syscall.EINVAL)
	writeErr(t, k, q(2), "18446744073709551616", syscall.ERANGE)
	writeErr(t, k, q(2), strconv.FormatUint(free, 10), syscall.ENOSPC) // vf1 holds some
	write(t, k, devPath(b50Addr, "sriov_numvfs"), "2")
	if got := read(t, k, q(2)); got != "0\n" {
		t.Fatalf("vf2 = %q: auto-provisioned although vf1 was pinned", got)
	}
	// Changed while enabled: allowed, unless the VF runs (its group open).
	write(t, k, q(2), "0x40000000")
	vf := k.devs["0000:05:00.2"]
	write(t, k, devPath("0000:05:00.2", "driver_override"), DrvVFIOPCI)
	write(t, k, "/sys/bus/pci/drivers_probe", "0000:05:00.2")
	h, err := k.Open(pci.GroupDevicePath(vf.group.id))
	if err != nil {
		t.Fatal(err)
	}
	writeErr(t, k, q(2), "0", syscall.EIO)
	_ = h.Close()
	// Bulk: every VF in turn; disabling releases them all.
	write(t, k, devPath("0000:05:00.2", "driver/unbind"), "0000:05:00.2")
	write(t, k, admin+".bulk_profile/vram_quota", "0")
	write(t, k, admin+".bulk_profile/vram_quota", strconv.Itoa(512<<20))
	if got := read(t, k, q(16)); got != strconv.Itoa(512<<20)+"\n" {
		t.Fatalf("vf16 after bulk = %q", got)
	}
	write(t, k, devPath(b50Addr, "sriov_numvfs"), "0")
	for _, n := range []int{1, 2, 16} {
		if got := read(t, k, q(n)); got != "0\n" {
			t.Fatalf("vf%d after disabling = %q, want released", n, got)
		}
	}
	// Before 7.0: no vram_quota.
	k = xeHost(t, nil, "")
	wantExists(t, k, q(1), false)
	wantExists(t, k, admin+".bulk_profile/vram_quota", false)
}

// TestXeVFIOPCI: xe-vfio-pci takes an xe VF only when driver_override
// names it, gives it /dev/vfio/<group> as vfio-pci does, and refuses a VF
// whose PF xe does not drive.
func TestXeVFIOPCI(t *testing.T) {
	k := NewFor(t, Host{GPUs: []HostGPU{{Model: ModelArcB50, Address: pci.MustParseAddress(b50Addr)}}, XeVFIO: true})
	wantExists(t, k, "/sys/module/xe_vfio_pci", true)
	write(t, k, devPath(b50Addr, "sriov_drivers_autoprobe"), "0")
	write(t, k, devPath(b50Addr, "sriov_numvfs"), "2")
	vf := "0000:05:00.1"
	// No override: its ids do not match (nor does xe's VF mode, autoprobe
	// off), so the VF stays unbound.
	write(t, k, "/sys/bus/pci/drivers_probe", vf)
	if d := driverOf(k, vf); d != "" {
		t.Fatalf("VF without override on %q", d)
	}
	writeErr(t, k, "/sys/bus/pci/drivers/"+DrvXeVFIO+"/bind", vf, syscall.ENODEV)
	if d := overrideProbe(t, k, vf, DrvXeVFIO); d != DrvXeVFIO {
		t.Fatalf("VF with override on %q", d)
	}
	g := k.devs[vf].group
	wantExists(t, k, pci.GroupDevicePath(g.id), true)
	h, err := k.Open(pci.GroupDevicePath(g.id))
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, k, devPath(vf, "enable")); got != "1\n" {
		t.Fatalf("enable while open = %q", got)
	}
	_ = h.Close()
	// A PF on pci-pf-stub: its VF's probe fails (xe_sriov_vfio_get_pf
	// finds no xe PF).
	k, err = New(Host{GPUs: []HostGPU{{Model: ModelArcB50, Address: pci.MustParseAddress(b50Addr)}}, XeVFIO: true, Loaded: []string{DrvPFStub}})
	if err != nil {
		t.Fatal(err)
	}
	write(t, k, devPath(b50Addr, "driver/unbind"), b50Addr)
	write(t, k, devPath(b50Addr, "driver_override"), DrvPFStub)
	write(t, k, "/sys/bus/pci/drivers_probe", b50Addr)
	write(t, k, devPath(b50Addr, "sriov_drivers_autoprobe"), "0")
	write(t, k, devPath(b50Addr, "sriov_numvfs"), "1")
	write(t, k, devPath(vf, "driver_override"), DrvXeVFIO)
	writeErr(t, k, "/sys/bus/pci/drivers/"+DrvXeVFIO+"/bind", vf, syscall.ENODEV)
	// Without the module there is no such driver, until modprobe loads it.
	k = xeHost(t, nil, "")
	wantExists(t, k, "/sys/bus/pci/drivers/"+DrvXeVFIO, false)
	wantExists(t, k, "/sys/module/xe_vfio_pci", false)
	if out, err := k.RunTool(context.Background(), sysfs.ToolModprobe, "xe-vfio-pci"); err != nil {
		t.Fatalf("modprobe xe-vfio-pci: %v: %s", err, out)
	}
	wantExists(t, k, "/sys/bus/pci/drivers/"+DrvXeVFIO+"/bind", true)
	wantExists(t, k, "/sys/module/xe_vfio_pci", true)
	if _, err := xeHost(t, nil, XeAdminNone).RunTool(context.Background(), sysfs.ToolModprobe, "xe-vfio-pci"); err == nil {
		t.Fatal("modprobe xe-vfio-pci before 6.19 succeeded")
	}
	if _, err := New(Host{GPUs: []HostGPU{{Model: ModelArcB50, Address: pci.MustParseAddress(b50Addr)}}, XeVFIO: true, XeAdmin: XeAdminNone}); err == nil {
		t.Fatal("xe-vfio-pci on a kernel before 6.19 accepted")
	}
}
