package simkernel

import (
	"syscall"
	"testing"
)

// The igb model mirrors QEMU's igb as the lab measured it (e2e/lab).
func TestIGBModel(t *testing.T) {
	const pf = "0000:01:00.0"
	k := newHost(t, ModelIGB, pf)
	if got := read(t, k, devPath(pf, "sriov_totalvfs")); got != "7\n" {
		t.Fatalf("sriov_totalvfs with igb bound = %q, want 7", got)
	}
	writeErr(t, k, devPath(pf, "sriov_numvfs"), "8", syscall.ERANGE)
	write(t, k, devPath(pf, "sriov_numvfs"), "3")
	for _, vf := range []string{"0000:01:10.0", "0000:01:10.2", "0000:01:10.4"} {
		if d := driverOf(k, vf); d != DrvIGBVF {
			t.Errorf("VF %s on %q, want igbvf", vf, d)
		}
	}
	// igb's remove() disables SR-IOV; without it the hardware's 8 show.
	write(t, k, "/sys/bus/pci/drivers/igb/unbind", pf)
	wantExists(t, k, devPath("0000:01:10.0", ""), false)
	if got := read(t, k, devPath(pf, "sriov_totalvfs")); got != "8\n" {
		t.Fatalf("sriov_totalvfs unbound = %q, want 8", got)
	}
	writeErr(t, k, devPath(pf, "sriov_numvfs"), "8", syscall.ENOENT)
	writeErr(t, k, devPath(pf, "sriov_numvfs"), "65536", syscall.EINVAL)
}

// vfio-pci enables its device while a user holds it.
func TestVFIOEnableWhileOpen(t *testing.T) {
	const pf, vf = "0000:01:00.0", "0000:01:10.0"
	k := newHost(t, ModelIGB, pf)
	write(t, k, devPath(pf, "sriov_numvfs"), "1")
	write(t, k, devPath(vf, "driver_override"), "vfio-pci")
	write(t, k, "/sys/bus/pci/drivers/igbvf/unbind", vf)
	write(t, k, "/sys/bus/pci/drivers_probe", vf)
	if got := read(t, k, devPath(vf, "enable")); got != "0\n" {
		t.Fatalf("enable on vfio-pci, not open = %q", got)
	}
	h, err := k.Open("/dev/vfio/" + groupOf(t, k, devPath(vf, "")))
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, k, devPath(vf, "enable")); got != "1\n" {
		t.Errorf("enable while open = %q, want 1", got)
	}
	h.Close()
	if got := read(t, k, devPath(vf, "enable")); got != "0\n" {
		t.Errorf("enable after close = %q, want 0", got)
	}
}
