package simkernel

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci/pcitest"
)

// The kernel's sriov_numvfs answers (docs/lab.md, "The differential
// test"; drivers/pci/iov.c, sriov_numvfs_store), one by one.
func TestNumVFsTable(t *testing.T) {
	numvfs := devPath(mi25Addr, "sriov_numvfs")
	tests := []struct {
		name  string
		setup func(t *testing.T, k *Kernel)
		write string
		errno syscall.Errno
		want  string // sriov_numvfs after
	}{
		{"enable", nil, "4", 0, "4\n"},
		{"enable with newline", nil, "4\n", 0, "4\n"},
		{"enable hex", nil, "0x4", 0, "4\n"},
		{"enable all", nil, "16", 0, "16\n"},
		{"above total", nil, "17", syscall.ERANGE, "0\n"},
		// Any kstrtou16 failure is EINVAL, overflow too (measured: 6.12, e2e/lab).
		{"above u16", nil, "70000", syscall.EINVAL, "0\n"},
		{"junk", nil, "abc", syscall.EINVAL, "0\n"},
		{"negative", nil, "-1", syscall.EINVAL, "0\n"},
		{"leading space", nil, " 4", syscall.EINVAL, "0\n"},
		{"no driver", func(t *testing.T, k *Kernel) {
			write(t, k, "/sys/bus/pci/drivers/sriov-standin/unbind", mi25Addr)
		}, "4", syscall.ENOENT, "0\n"},
		{"no driver, same value", func(t *testing.T, k *Kernel) {
			write(t, k, "/sys/bus/pci/drivers/sriov-standin/unbind", mi25Addr)
		}, "0", 0, "0\n"},
		{"N to M", func(t *testing.T, k *Kernel) { write(t, k, numvfs, "4") }, "2", syscall.EBUSY, "4\n"},
		{"same value", func(t *testing.T, k *Kernel) { write(t, k, numvfs, "4") }, "4", 0, "4\n"},
		{"to zero", func(t *testing.T, k *Kernel) { write(t, k, numvfs, "4") }, "0", 0, "0\n"},
		{"PF on vfio-pci", func(t *testing.T, k *Kernel) {
			toVFIO(t, k, mi25Addr, DrvSRIOVStandin)
		}, "4", syscall.ENOENT, "0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newHost(t, ModelMI25, mi25Addr)
			if tt.setup != nil {
				tt.setup(t, k)
			}
			writeErr(t, k, numvfs, tt.write, tt.errno)
			if got := read(t, k, numvfs); got != tt.want {
				t.Fatalf("sriov_numvfs = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestVFsAppearAndDisappear(t *testing.T) {
	k := newHost(t, ModelMI25, mi25Addr)
	pfGroup := groupOf(t, k, devPath(mi25Addr, ""))
	write(t, k, devPath(mi25Addr, "sriov_numvfs"), "3")
	vfs := []string{"0000:03:00.1", "0000:03:00.2", "0000:03:00.3"}
	groups := map[string]bool{pfGroup: true}
	for i, vf := range vfs {
		if got, err := k.Readlink(devPath(mi25Addr, fmt.Sprintf("virtfn%d", i))); err != nil || got != "../"+vf {
			t.Fatalf("virtfn%d -> %q %v", i, got, err)
		}
		if got, err := k.Readlink(devPath(vf, "physfn")); err != nil || got != "../"+mi25Addr {
			t.Fatalf("physfn -> %q %v", got, err)
		}
		if got := read(t, k, devPath(vf, "device")); got != "0x686c\n" {
			t.Errorf("VF device = %q", got)
		}
		if got := read(t, k, devPath(vf, "driver_override")); got != "(null)\n" {
			t.Errorf("VF override = %q", got)
		}
		if got := read(t, k, devPath(vf, "reset_method")); got != "flr\n" {
			t.Errorf("VF reset_method = %q", got)
		}
		// GIM VFs are claimed by pci-stub on autoprobe.
		if d := driverOf(k, vf); d != DrvPCIStub {
			t.Errorf("VF %s driver %q, want pci-stub", vf, d)
		}
		g := groupOf(t, k, devPath(vf, ""))
		if groups[g] {
			t.Errorf("VF %s shares group %s", vf, g)
		}
		groups[g] = true
		wantExists(t, k, "/sys/kernel/iommu_groups/"+g+"/devices/"+vf, true)
		wantExists(t, k, devPath(vf, "sriov_numvfs"), false)
	}
	wantExists(t, k, devPath("0000:03:00.4", ""), false)

	// Put VF 1 on vfio-pci, then disable: everything goes.
	vf := vfs[1]
	g := groupOf(t, k, devPath(vf, ""))
	if node := toVFIO(t, k, vf, DrvPCIStub); node != "/dev/vfio/"+g {
		t.Fatalf("group node %s, want /dev/vfio/%s", node, g)
	}
	wantExists(t, k, "/dev/vfio/"+g, true)
	write(t, k, devPath(mi25Addr, "sriov_numvfs"), "0")
	for i, vf := range vfs {
		wantExists(t, k, devPath(vf, ""), false)
		wantExists(t, k, devPath(mi25Addr, fmt.Sprintf("virtfn%d", i)), false)
		wantExists(t, k, "/sys/bus/pci/drivers/pci-stub/"+vf, false)
	}
	wantExists(t, k, "/dev/vfio/"+g, false)
	wantExists(t, k, "/sys/kernel/iommu_groups/"+g, false)
	wantExists(t, k, "/sys/bus/pci/drivers/vfio-pci/"+vf, false)

	// Groups are reused lowest-first, as the kernel's IDA does.
	write(t, k, devPath(mi25Addr, "sriov_numvfs"), "1")
	if got := groupOf(t, k, devPath(vfs[0], "")); got != "2" {
		t.Errorf("re-created VF got group %s, want the lowest free (2)", got)
	}
}

func TestVFAutoprobePerModel(t *testing.T) {
	tests := []struct {
		model, pf, vf0, want string
		n                    string
	}{
		{ModelMI25, mi25Addr, "0000:03:00.1", DrvPCIStub, "2"},
		{ModelQEMUNVMe, nvmeAddr, "0000:01:00.1", "", "2"}, // nvme fails on the VFs
		{ModelA100, a100Addr, "0000:65:00.4", DrvNVIDIA, "2"},
		{ModelL40S, l40sAddr, "0000:86:00.4", DrvNVIDIA, "2"},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			k := newHost(t, tt.model, tt.pf)
			if k.devs[tt.pf].model.ids.vendor == 0x10de {
				sriovManage(t, k, "-e", tt.pf) // nvidia has no sriov_configure
			} else {
				write(t, k, devPath(tt.pf, "sriov_numvfs"), tt.n)
			}
			if d := driverOf(k, tt.vf0); d != tt.want {
				t.Fatalf("VF0 driver %q, want %q", d, tt.want)
			}
		})
	}
}

func TestVFAddressesCarryIntoDeviceNumber(t *testing.T) {
	k := newHost(t, ModelL40S, l40sAddr)
	sriovManage(t, k, "-e", l40sAddr)
	// offset 4, stride 1: VF0 .4 ... VF3 .7, VF4 01.0, VF31 04.3
	for i, want := range map[int]string{0: "0000:86:00.4", 3: "0000:86:00.7", 4: "0000:86:01.0", 31: "0000:86:04.3"} {
		if got := linkBase(t, k, devPath(l40sAddr, fmt.Sprintf("virtfn%d", i))); got != want {
			t.Errorf("virtfn%d = %s, want %s", i, got, want)
		}
	}
	wantExists(t, k, devPath("0000:86:04.4", ""), false)
}

func TestSRIOVDriversAutoprobe(t *testing.T) {
	k := newHost(t, ModelMI25, mi25Addr)
	ap := devPath(mi25Addr, "sriov_drivers_autoprobe")
	writeErr(t, k, ap, "maybe", syscall.EINVAL)
	write(t, k, ap, "0")
	if got := read(t, k, ap); got != "0\n" {
		t.Fatalf("autoprobe = %q", got)
	}
	write(t, k, devPath(mi25Addr, "sriov_numvfs"), "2")
	vf := "0000:03:00.1"
	if d := driverOf(k, vf); d != "" {
		t.Fatalf("VF probed with autoprobe 0: %q", d)
	}
	// new_id + bind with autoprobe 0 fails ENODEV (measured).
	write(t, k, "/sys/bus/pci/drivers/vfio-pci/new_id", "1002 686c")
	if d := driverOf(k, vf); d != "" {
		t.Fatalf("new_id attached a VF whose PF has autoprobe 0: %q", d)
	}
	writeErr(t, k, "/sys/bus/pci/drivers/vfio-pci/bind", vf, syscall.ENODEV)
	// drivers_probe does nothing and succeeds.
	write(t, k, "/sys/bus/pci/drivers_probe", vf)
	if d := driverOf(k, vf); d != "" {
		t.Fatalf("drivers_probe bound it: %q", d)
	}
	// driver_override naming the driver lifts the restriction.
	if d := overrideProbe(t, k, vf, "vfio-pci"); d != DrvVFIOPCI {
		t.Fatalf("override + drivers_probe: %q", d)
	}
	write(t, k, ap, "on")
	if got := read(t, k, ap); got != "1\n" {
		t.Fatalf("autoprobe = %q", got)
	}
}

func TestNumVFsZeroBlocksWhileVFOpen(t *testing.T) {
	k := newHost(t, ModelMI25, mi25Addr)
	write(t, k, devPath(mi25Addr, "sriov_numvfs"), "2")
	vf := "0000:03:00.2"
	node := toVFIO(t, k, vf, DrvPCIStub)
	h := openDevice(t, k, node)
	done := pcitest.Async(func() error { return k.WriteFile(devPath(mi25Addr, "sriov_numvfs"), []byte("0")) })
	pcitest.StillBlocked(t, "sriov_numvfs=0", done)
	if got := read(t, k, devPath(mi25Addr, "sriov_numvfs")); got != "2\n" {
		t.Fatalf("numvfs during the wait = %q", got)
	}
	// A second writer on the same PF queues behind the device lock.
	second := pcitest.Async(func() error { return k.WriteFile(devPath(mi25Addr, "sriov_numvfs"), []byte("3")) })
	pcitest.StillBlocked(t, "sriov_numvfs=3 behind the blocked 0", second)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	pcitest.Released(t, "sriov_numvfs=0", done)
	pcitest.Released(t, "sriov_numvfs=3", second)
	if got := read(t, k, devPath(mi25Addr, "sriov_numvfs")); got != "3\n" {
		t.Fatalf("numvfs after = %q", got)
	}
}

func TestVFIOPCIRefusesPFWithVFs(t *testing.T) {
	k := newHost(t, ModelQEMUNVMe, nvmeAddr)
	write(t, k, devPath(nvmeAddr, "sriov_numvfs"), "1")
	write(t, k, "/sys/bus/pci/drivers/vfio-pci/new_id", "1b36 0010")
	// The unbound VF is taken by the new id (nvme failed on it).
	if d := driverOf(k, "0000:01:00.1"); d != DrvVFIOPCI {
		t.Fatalf("VF after new_id: %q", d)
	}
	write(t, k, devPath("0000:01:00.1", "driver_override"), "vfio-pci")
	write(t, k, "/sys/bus/pci/drivers/vfio-pci/unbind", "0000:01:00.1")
	// Unbinding nvme from the PF leaves SR-IOV enabled: nvme's remove() does
	// not disable it (measured in e2e/lab).
	write(t, k, "/sys/bus/pci/drivers/nvme/unbind", nvmeAddr)
	if got := read(t, k, devPath(nvmeAddr, "sriov_numvfs")); got != "1\n" {
		t.Fatalf("numvfs after PF unbind = %q, want 1", got)
	}
	wantExists(t, k, devPath("0000:01:00.1", ""), true)
	// vfio-pci does not take the PF while its VFs exist: drivers_probe
	// succeeds and leaves it unbound.
	if d := overrideProbe(t, k, nvmeAddr, "vfio-pci"); d != "" {
		t.Fatalf("PF with VFs after drivers_probe with override vfio-pci: on %q, want unbound", d)
	}
	write(t, k, devPath(nvmeAddr, "driver_override"), "\n")
	write(t, k, "/sys/bus/pci/drivers/nvme/bind", nvmeAddr)
	write(t, k, devPath(nvmeAddr, "sriov_numvfs"), "0")
	wantExists(t, k, devPath("0000:01:00.1", ""), false)
	// Explicitly binding nvme to a VF fails; the VF stays unbound.
	write(t, k, devPath(nvmeAddr, "sriov_numvfs"), "1")
	write(t, k, "/sys/bus/pci/drivers/vfio-pci/remove_id", "1b36 0010")
	write(t, k, "/sys/bus/pci/drivers/vfio-pci/unbind", "0000:01:00.1")
	writeErr(t, k, "/sys/bus/pci/drivers/nvme/bind", "0000:01:00.1", syscall.ENODEV)
	// vfio-pci's probe of a PF with VFs: EBUSY.
	write(t, k, devPath(nvmeAddr, "driver_override"), "vfio-pci")
	k.mu.Lock()
	pf := k.devs[nvmeAddr]
	drv := k.drvByName[DrvVFIOPCI]
	errno := k.driverProbe(drv, pf)
	k.mu.Unlock()
	if errno != syscall.EBUSY {
		t.Fatalf("vfio-pci probe of a PF with VFs = %v, want EBUSY", errno)
	}
}
