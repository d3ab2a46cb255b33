package simkernel

import (
	"syscall"
	"testing"
)

func TestFaultInjection(t *testing.T) {
	busPath := devPath(plainAddr, "driver_override")
	realPath := "/sys/devices/pci0000:09/0000:09:00.0/" + plainAddr + "/driver_override"
	tests := []struct {
		name   string
		fault  Fault
		writes []string // paths written, in order
		fail   []bool   // which writes fail
	}{
		{"first once", Fault{Path: busPath, Nth: 1, Errno: syscall.EIO},
			[]string{busPath, busPath, busPath}, []bool{true, false, false}},
		{"nth once", Fault{Path: busPath, Nth: 2, Errno: syscall.EBUSY},
			[]string{busPath, busPath, busPath}, []bool{false, true, false}},
		{"always from nth", Fault{Path: busPath, Nth: 2, Errno: syscall.EBUSY, Always: true},
			[]string{busPath, busPath, busPath, busPath}, []bool{false, true, true, true}},
		{"nth 0 means first", Fault{Path: busPath, Errno: syscall.EPERM},
			[]string{busPath, busPath}, []bool{true, false}},
		{"fault on bus path, write on real path", Fault{Path: busPath, Nth: 1, Errno: syscall.EIO},
			[]string{realPath}, []bool{true}},
		{"fault on real path, write on bus path", Fault{Path: realPath, Nth: 2, Errno: syscall.EIO},
			[]string{busPath, busPath}, []bool{false, true}},
		{"other paths untouched", Fault{Path: busPath, Always: true, Errno: syscall.EIO},
			[]string{devPath(plainAddr, "numa_node")}, []bool{false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newHost(t, ModelPlain, plainAddr)
			k.InjectFault(tt.fault)
			for i, p := range tt.writes {
				val := "vfio-pci"
				if p == devPath(plainAddr, "numa_node") {
					val = "0"
				}
				err := k.WriteFile(p, []byte(val))
				want := syscall.Errno(0)
				if tt.fail[i] {
					want = tt.fault.Errno
				}
				wantErrno(t, "write "+p, err, want)
			}
		})
	}
}

func TestFaultedWriteHasNoEffectAndClear(t *testing.T) {
	k := newHost(t, ModelMI25, mi25Addr)
	numvfs := devPath(mi25Addr, "sriov_numvfs")
	id := k.InjectFault(Fault{Path: numvfs, Always: true, Errno: syscall.ENOMEM})
	writeErr(t, k, numvfs, "4", syscall.ENOMEM)
	if got := read(t, k, numvfs); got != "0\n" {
		t.Fatalf("faulted write took effect: %q", got)
	}
	k.ClearFault(id)
	write(t, k, numvfs, "4")
	k.InjectFault(Fault{Path: numvfs, Always: true})
	writeErr(t, k, numvfs, "0", syscall.EIO) // Errno 0 means EIO
	k.ClearFaults()
	write(t, k, numvfs, "0")

	// A fault on a VF that does not exist yet matches once it does.
	vfOverride := devPath("0000:03:00.1", "driver_override")
	k.InjectFault(Fault{Path: vfOverride, Errno: syscall.EACCES})
	write(t, k, numvfs, "1")
	writeErr(t, k, vfOverride, "vfio-pci", syscall.EACCES)
	write(t, k, vfOverride, "vfio-pci")
}

func TestWritesCounter(t *testing.T) {
	k := newHost(t, ModelMI25, mi25Addr)
	numvfs := devPath(mi25Addr, "sriov_numvfs")
	real := "/sys/devices/pci0000:02/0000:02:00.0/" + mi25Addr + "/sriov_numvfs"
	if k.Writes(numvfs) != 0 {
		t.Fatal("fresh kernel counts writes")
	}
	write(t, k, numvfs, "2")
	write(t, k, real, "2")
	writeErr(t, k, numvfs, "abc", syscall.EINVAL) // failed writes count
	if got := k.Writes(numvfs); got != 3 {
		t.Fatalf("Writes(bus path) = %d, want 3", got)
	}
	if got := k.Writes(real); got != 3 {
		t.Fatalf("Writes(real path) = %d, want 3", got)
	}
	writeErr(t, k, devPath(mi25Addr, "vendor"), "1", syscall.EACCES) // refused at open: not a write
	if got := k.Writes(devPath(mi25Addr, "vendor")); got != 0 {
		t.Fatalf("Writes(vendor) = %d", got)
	}
	// Counters survive the device going away (VF paths).
	write(t, k, devPath("0000:03:00.1", "driver_override"), "vfio-pci")
	write(t, k, numvfs, "0")
	if got := k.Writes(devPath("0000:03:00.1", "driver_override")); got != 1 {
		t.Fatalf("Writes(removed VF attr) = %d", got)
	}
}
