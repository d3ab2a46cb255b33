package simkernel

import (
	"strconv"
	"testing"
)

// An opener of a VFIO node shows in /proc as the real kernel shows QEMU:
// comm and an fd link to the node; its directory goes with the last fd.
func TestProcShowsDeviceOpeners(t *testing.T) {
	k := newHost(t, ModelPlain, plainAddr)
	node := toVFIO(t, k, plainAddr, DrvNouveau)
	h, err := k.OpenAs(Opener{PID: 812, Comm: "qemu-system-x86_64"}, node)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := k.ReadFile("/proc/812/comm"); err != nil || string(b) != "qemu-system-x86\n" {
		t.Fatalf("comm = %q, %v; want the name cut to 15 bytes as TASK_COMM_LEN does", b, err)
	}
	if l, err := k.Readlink("/proc/812/fd/3"); err != nil || l != node {
		t.Fatalf("fd 3 -> %q, %v; want %s", l, err, node)
	}
	ctl, err := k.OpenAs(Opener{PID: 812}, "/dev/vfio/vfio")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := k.Readlink("/proc/812/fd/4"); err != nil || l != "/dev/vfio/vfio" {
		t.Fatalf("fd 4 -> %q, %v", l, err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Lstat("/proc/812/fd/3"); err == nil {
		t.Fatal("fd 3 outlived its Close")
	}
	if err := ctl.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Lstat("/proc/812"); err == nil {
		t.Fatal("/proc/812 outlived its last fd")
	}
	// Open: a new simulated QEMU per call.
	a, err := k.Open("/dev/vfio/vfio")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := k.Open("/dev/vfio/vfio")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, pid := range []int{firstSimPID, firstSimPID + 1} {
		if c, err := k.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err != nil || string(c) != "qemu-system-x86\n" {
			t.Fatalf("/proc/%d/comm = %q, %v", pid, c, err)
		}
	}
}
