package simkernel

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/pci/pcitest"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Old GIM as its source behaves (gim.go): no driver link on the PF, VFs at
// module load from vf_num (0: all), sriov_numvfs refused, the config file
// rewritten from the parameters, SR-IOV off at unload.
func TestGIMEnablesVFsAtLoad(t *testing.T) {
	k := newHost(t, ModelS7150, s7150Addr)
	numvfs := devPath(s7150Addr, "sriov_numvfs")
	if got := read(t, k, numvfs); got != "16\n" {
		t.Fatalf("after boot sriov_numvfs = %q, want 16 (vf_num 0 = TotalVFs)", got)
	}
	wantExists(t, k, devPath(s7150Addr, "driver"), false)
	if d := driverOf(k, "0000:3d:00.1"); d != DrvPCIStub {
		t.Fatalf("VF0 on %q, want pci-stub (pci-stub.ids)", d)
	}
	if got := k.GIMConfig(); got != "fb_option=0\nsched_option=0\nvf_num=0\npf_fb=0\nvf_fb=0\nsched_interval=0\nsched_interval_us=0\nfb_clear=0\n" {
		t.Fatalf("/etc/gim_config = %q", got)
	}
	// The same value is a no-op even without a driver; any other is ENOENT.
	write(t, k, numvfs, "16")
	writeErr(t, k, numvfs, "4", syscall.ENOENT)
	writeErr(t, k, numvfs, "0", syscall.ENOENT)

	modprobe := func(args ...string) (string, error) {
		out, err := k.RunTool(context.Background(), sysfs.ToolModprobe, args...)
		return string(out), err
	}
	if _, err := modprobe("-r", "gim"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, k, numvfs); got != "0\n" {
		t.Fatalf("after rmmod sriov_numvfs = %q", got)
	}
	wantExists(t, k, "/sys/module/gim", false)
	wantExists(t, k, "/sys/bus/pci/drivers/gim", false)
	if out, err := modprobe("-r", "gim"); err == nil || !strings.Contains(out, "Module gim is not in kernel") {
		t.Fatalf("second rmmod: %q %v", out, err)
	}
	if _, err := modprobe("gim", "vf_num=4", "sched_option=2"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, k, numvfs); got != "4\n" {
		t.Fatalf("after modprobe gim vf_num=4 sriov_numvfs = %q", got)
	}
	if got := read(t, k, "/sys/module/gim/parameters/vf_num"); got != "4\n" {
		t.Fatalf("parameter vf_num = %q", got)
	}
	if got := read(t, k, "/sys/module/gim/parameters/pf_fb"); got != "4294967295\n" {
		t.Fatalf("unset parameter pf_fb = %q, want uint -1", got)
	}
	if got := k.GIMConfig(); !strings.Contains(got, "sched_option=2\nvf_num=4\n") {
		t.Fatalf("/etc/gim_config = %q, want the parameters saved", got)
	}
	// A load while loaded does nothing, parameters included.
	if _, err := modprobe("gim", "vf_num=2"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, k, numvfs); got != "4\n" {
		t.Fatalf("modprobe of a loaded gim changed sriov_numvfs to %q", got)
	}
	// The saved vf_num holds across a reload (a reboot) without parameters.
	if _, err := modprobe("-r", "gim"); err != nil {
		t.Fatal(err)
	}
	if _, err := modprobe("gim"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, k, numvfs); got != "4\n" {
		t.Fatalf("reload from /etc/gim_config: sriov_numvfs = %q", got)
	}
	if out, err := modprobe("gim", "vf_num=x"); err != nil || out != "" {
		t.Fatalf("modprobe of a loaded module with a bad parameter: %q %v (a loaded module is not inserted again)", out, err)
	}
	if out, err := modprobe("nosuchmod"); err == nil || !strings.Contains(out, "not found") {
		t.Fatalf("unknown module: %q %v", out, err)
	}
}

func TestGIMConfigFile(t *testing.T) {
	k := newHost(t, ModelS7150, s7150Addr)
	modprobe := func(args ...string) {
		t.Helper()
		if out, err := k.RunTool(context.Background(), sysfs.ToolModprobe, args...); err != nil {
			t.Fatalf("modprobe %v: %v %s", args, err, out)
		}
	}
	modprobe("-r", "gim")
	// An admin's file: spaces around '=', out-of-range values ignored,
	// parsing stops at an unknown key.
	k.SetHostFile("/etc/gim_config", "vf_num = 8\nsched_interval=5000\nbogus=1\nfb_clear=1\n")
	modprobe("gim")
	if got := read(t, k, devPath(s7150Addr, "sriov_numvfs")); got != "8\n" {
		t.Fatalf("sriov_numvfs = %q, want 8 from the file", got)
	}
	got := k.GIMConfig()
	if !strings.HasPrefix(got, "fb_option=0\nsched_option=0\nvf_num=8\npf_fb=0\nvf_fb=0\nsched_interval=0\nsched_interval_us=0\nfb_clear=0\n") {
		t.Fatalf("/etc/gim_config = %q", got)
	}
	// save_config writes without O_TRUNC: a shorter content leaves the old
	// file's last bytes behind.
	modprobe("-r", "gim")
	modprobe("gim", "vf_num=16")
	modprobe("-r", "gim")
	modprobe("gim", "vf_num=4")
	want := "fb_option=0\nsched_option=0\nvf_num=4\npf_fb=0\nvf_fb=0\nsched_interval=0\nsched_interval_us=0\nfb_clear=0\n"
	if got := k.GIMConfig(); got != want+"\n" {
		t.Fatalf("/etc/gim_config = %q, want %q and the old file's last byte", got, want)
	}
}

// VFs in use hold an unload until their VFIO user lets go, as
// pci_disable_sriov waits for vfio-pci's remove.
func TestGIMUnloadWaitsForVFUser(t *testing.T) {
	k := newHost(t, ModelS7150, s7150Addr)
	vf := "0000:3d:00.1"
	h := openDevice(t, k, toVFIO(t, k, vf, DrvPCIStub))
	pcitest.BlocksUntilReleased(t, "modprobe -r gim", h, tool(k, sysfs.ToolModprobe, "-r", "gim"))
	if ok, _ := pci.Exists(k, pci.MustParseAddress(vf)); ok {
		t.Fatal("VF still exists after rmmod gim")
	}
}
