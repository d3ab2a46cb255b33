package simkernel

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

const mi300xAddr = "0000:05:00.0"

func amdSMI(t testing.TB, k *Kernel, args ...string) string {
	t.Helper()
	out, err := k.RunTool(context.Background(), sysfs.ToolAMDSMI, args...)
	if err != nil {
		t.Fatalf("amd-smi %v: %v", args, err)
	}
	return string(out)
}

// New GIM as its source behaves (newgim.go): the PF bound to gim, VFs at
// probe from vf_num, sriov_numvfs refused, the count changed by amd-smi
// only while no VF is in use, the partition following the count.
func TestNewGIMBootAndNumVF(t *testing.T) {
	k := newHost(t, ModelMI300X, mi300xAddr)
	numvfs := devPath(mi300xAddr, "sriov_numvfs")
	if got := read(t, k, numvfs); got != "1\n" {
		t.Fatalf("after boot sriov_numvfs = %q, want 1 (vf_num's default)", got)
	}
	if d := driverOf(k, mi300xAddr); d != DrvGIM {
		t.Fatalf("PF on %q, want gim (bound by its dynamic ids)", d)
	}
	if got := k.GIMConfig(); got != "vf_num=1\naccelerator_partition_mode=1\nmemory_partition_mode=1\n" {
		t.Fatalf("/etc/gim_config = %q", got)
	}
	if p := k.AcceleratorPartition(mi300xAddr); p != "SPX" {
		t.Fatalf("partition %q, want SPX", p)
	}
	// The same value is a no-op; any other is ENOENT: gim has no sriov_configure.
	write(t, k, numvfs, "1")
	writeErr(t, k, numvfs, "8", syscall.ENOENT)

	out := amdSMI(t, k, "set", "--gpu="+mi300xAddr, "--num-vf=8")
	if !strings.Contains(out, "Successfully set number of VFs to 8") {
		t.Fatalf("amd-smi said %q", out)
	}
	if got := read(t, k, numvfs); got != "8\n" {
		t.Fatalf("after --num-vf=8 sriov_numvfs = %q", got)
	}
	if p := k.AcceleratorPartition(mi300xAddr); p != "CPX" {
		t.Fatalf("partition %q, want CPX with 8 VFs", p)
	}
	// The count is not saved: the file keeps vf_num=1 for the next load.
	if got := k.GIMConfig(); got != "vf_num=1\naccelerator_partition_mode=8\nmemory_partition_mode=4\n" {
		t.Fatalf("/etc/gim_config = %q", got)
	}
	if out := amdSMI(t, k, "set", "--gpu=0", "--num-vf=3"); !strings.Contains(out, "error -1001 - Invalid parameters") {
		t.Fatalf("--num-vf=3: %q", out)
	}
	// A partition must suit the count; it never changes it.
	if out := amdSMI(t, k, "set", "--gpu=0", "--accelerator-partition=1"); !strings.Contains(out, "Can't set accelerator partition to 1") {
		t.Fatalf("DPX with 8 VFs: %q", out)
	}
	if got := read(t, k, numvfs); got != "8\n" {
		t.Fatalf("after a refused partition sriov_numvfs = %q", got)
	}
	if out := amdSMI(t, k, "static", "--gpu=0", "--num-vf"); !strings.Contains(out, "ENABLED: 8") {
		t.Fatalf("static: %q", out)
	}
}

// A VF a VM holds makes amdgv_int_set_vf_number refuse (VF_BUSY); the CLI
// prints the error and still exits 0.
func TestNewGIMRefusesWhileVFInUse(t *testing.T) {
	k := newHost(t, ModelMI300X, mi300xAddr)
	vf := "0000:05:00.1"
	write(t, k, devPath(vf, "driver_override"), "vfio-pci")
	write(t, k, "/sys/bus/pci/drivers_probe", vf)
	h := openDevice(t, k, "/dev/vfio/"+groupOf(t, k, devPath(vf, "")))
	out := amdSMI(t, k, "set", "--gpu="+mi300xAddr, "--num-vf=8")
	if out != "SMI-LIB has returned error -1030 - Device busy. Error code: -1030\n" {
		t.Fatalf("busy: %q", out)
	}
	if got := read(t, k, devPath(mi300xAddr, "sriov_numvfs")); got != "1\n" {
		t.Fatalf("sriov_numvfs = %q after a refusal", got)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	amdSMI(t, k, "set", "--gpu="+mi300xAddr, "--num-vf=8")
	if got := read(t, k, devPath(mi300xAddr, "sriov_numvfs")); got != "8\n" {
		t.Fatalf("sriov_numvfs = %q once the VF is free", got)
	}
}

// vf_num from the file, per GPU with the last value repeating; a count the
// GPU does not offer is capped.
func TestNewGIMConfigAtLoad(t *testing.T) {
	addrs := []string{mi300xAddr, "0000:15:00.0", "0000:25:00.0"}
	h := Host{GPUs: []HostGPU{{Model: ModelMI300X, Address: pci.MustParseAddress(addrs[0])},
		{Model: ModelV710, Address: pci.MustParseAddress(addrs[1])}, {Model: ModelV710, Address: pci.MustParseAddress(addrs[2])}},
		Files: map[string]string{"/etc/gim_config": "vf_num=8,4\naccelerator_partition_mode=0\nmemory_partition_mode=0\n"}}
	k := NewFor(t, h)
	for i, want := range []string{"8\n", "4\n", "4\n"} {
		a := addrs[i]
		if got := read(t, k, devPath(a, "sriov_numvfs")); got != want {
			t.Errorf("GPU %d (%s): sriov_numvfs = %q, want %q", i, a, got, want)
		}
	}
	mixed := Host{GPUs: []HostGPU{h.GPUs[0], {Model: ModelS7150, Address: pci.MustParseAddress(s7150Addr)}}}
	if _, err := New(mixed); err == nil || !strings.Contains(err.Error(), "cannot share a host") {
		t.Fatalf("a host with old and new GIM GPUs: %v", err)
	}
}
