package simkernel

import (
	"syscall"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

const b50Addr = "0000:05:00.0"

func xeHost(t *testing.T, maxVFs *int, admin string) *Kernel {
	t.Helper()
	k, err := New(Host{GPUs: []HostGPU{{Model: ModelArcB50, Address: pci.MustParseAddress(b50Addr)}}, XeMaxVFs: maxVFs, XeAdmin: admin})
	if err != nil {
		t.Fatal(err)
	}
	return k
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
	write(t, k, admin+"vf2/stop", "1")
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
