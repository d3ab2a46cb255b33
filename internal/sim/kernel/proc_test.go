package simkernel

import (
	"errors"
	"strconv"
	"syscall"
	"testing"
)

// An opener of a VFIO node shows in /proc as the real kernel shows QEMU:
// comm and an fd link to the node; its directory goes with the last fd.
func TestProcShowsDeviceOpeners(t *testing.T) {
	k := newHost(t, ModelPlain, plainAddr)
	node := toVFIO(t, k, plainAddr, DrvNouveau)
	h := openAs(t, k, Opener{PID: 812, Comm: "qemu-system-x86_64"}, node)
	if b, err := k.ReadFile("/proc/812/comm"); err != nil || string(b) != "qemu-system-x86\n" {
		t.Fatalf("comm = %q, %v; want the name cut to 15 bytes as TASK_COMM_LEN does", b, err)
	}
	if l, err := k.Readlink("/proc/812/fd/3"); err != nil || l != node {
		t.Fatalf("fd 3 -> %q, %v; want %s", l, err, node)
	}
	ctl := openAs(t, k, Opener{PID: 812}, "/dev/vfio/vfio")
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

// A process whose open files the reader may not see (no CAP_SYS_PTRACE):
// its fd directory lists, its links read EACCES, for fds opened before
// and after; made readable again, they read.
func TestUnreadableFDs(t *testing.T) {
	k := newHost(t, ModelPlain, plainAddr)
	node := toVFIO(t, k, plainAddr, DrvNouveau)
	h := openAs(t, k, Opener{PID: 900, Comm: "qemu-system-x86_64"}, node)
	defer h.Close()
	k.SetFDsUnreadable(900, true)
	ctl := openAs(t, k, Opener{PID: 900}, "/dev/vfio/vfio")
	defer ctl.Close()
	ents, err := k.ReadDir("/proc/900/fd")
	if err != nil || len(ents) != 2 {
		t.Fatalf("list /proc/900/fd: %v, %v", ents, err)
	}
	for _, fd := range []string{"3", "4"} {
		if _, err := k.Readlink("/proc/900/fd/" + fd); !errors.Is(err, syscall.EACCES) {
			t.Fatalf("readlink fd %s: %v, want EACCES", fd, err)
		}
	}
	if b, err := k.ReadFile("/proc/900/comm"); err != nil || string(b) != "qemu-system-x86\n" {
		t.Fatalf("comm = %q, %v; /proc/<pid>/comm stays readable", b, err)
	}
	k.SetFDsUnreadable(900, false)
	if l, err := k.Readlink("/proc/900/fd/3"); err != nil || l != node {
		t.Fatalf("fd 3 readable again: %q, %v", l, err)
	}
}
