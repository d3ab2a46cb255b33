package simkernel

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Addresses used across the tests.
const (
	mi25Addr   = "0000:03:00.0"
	t4Addr     = "0000:3b:00.0"
	l40sAddr   = "0000:86:00.0"
	a100Addr   = "0000:65:00.0"
	a100VFAddr = "0000:ca:00.0"
	gvtgAddr   = "0000:00:02.0"
	nvmeAddr   = "0000:01:00.0"
	plainAddr  = "0000:0a:00.0"
	plainAudio = "0000:0a:00.1"
	s7150Addr  = "0000:3d:00.0"
)

func devPath(addr, attr string) string {
	if attr == "" {
		return "/sys/bus/pci/devices/" + addr
	}
	return "/sys/bus/pci/devices/" + addr + "/" + attr
}

// newHost builds a kernel with one device per (model, address) pair; an
// empty address is fine for virtual models.
func newHost(t testing.TB, pairs ...string) *Kernel {
	t.Helper()
	var h Host
	for i := 0; i < len(pairs); i += 2 {
		g := HostGPU{Model: pairs[i]}
		if pairs[i+1] != "" {
			g.Address = pci.MustParseAddress(pairs[i+1])
		}
		h.GPUs = append(h.GPUs, g)
	}
	return NewFor(t, h)
}

// parseKernel builds a kernel from a host file's text, failing the test if
// ParseHost or New refuses it.
func parseKernel(t testing.TB, name string, yaml []byte) *Kernel {
	t.Helper()
	h, err := ParseHost(name, yaml)
	if err != nil {
		t.Fatalf("ParseHost: %v", err)
	}
	return NewFor(t, h)
}

func read(t testing.TB, k *Kernel, p string) string {
	t.Helper()
	b, err := k.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

func write(t testing.TB, k *Kernel, p, v string) {
	t.Helper()
	if err := k.WriteFile(p, []byte(v)); err != nil {
		t.Fatalf("write %q to %s: %v", v, p, err)
	}
}

// sriovManage runs the simulated NVIDIA sriov-manage with flag on pf: the
// only way an nvidia PF gets or loses VFs.
func sriovManage(t testing.TB, k *Kernel, flag, pf string) string {
	t.Helper()
	out, err := k.RunTool(context.Background(), sysfs.ToolSriovManage, flag, pf)
	if err != nil {
		t.Fatalf("sriov-manage %s %s: %v\n%s", flag, pf, err, out)
	}
	return string(out)
}

// wantErrno checks that err is a *fs.PathError carrying errno (0: nil).
func wantErrno(t testing.TB, what string, err error, errno syscall.Errno) {
	t.Helper()
	if errno == 0 {
		if err != nil {
			t.Fatalf("%s: unexpected error %v", what, err)
		}
		return
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		t.Fatalf("%s: error %v (%T), want *fs.PathError with %v", what, err, err, errno)
	}
	if !errors.Is(err, errno) {
		t.Fatalf("%s: error %v, want %v (%d)", what, err, errno.Error(), int(errno))
	}
}

func writeErr(t testing.TB, k *Kernel, p, v string, errno syscall.Errno) {
	t.Helper()
	wantErrno(t, "write "+strings.TrimSpace(v)+" to "+p, k.WriteFile(p, []byte(v)), errno)
}

func exists(k *Kernel, p string) bool {
	_, err := k.Lstat(p)
	return err == nil
}

func wantExists(t testing.TB, k *Kernel, p string, want bool) {
	t.Helper()
	if got := exists(k, p); got != want {
		t.Fatalf("%s exists = %v, want %v", p, got, want)
	}
}

func linkBase(t testing.TB, k *Kernel, p string) string {
	t.Helper()
	target, err := k.Readlink(p)
	if err != nil {
		t.Fatalf("readlink %s: %v", p, err)
	}
	return filepath.Base(target)
}

func driverOf(k *Kernel, addr string) string {
	target, err := k.Readlink(devPath(addr, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

func groupOf(t testing.TB, k *Kernel, dev string) string {
	t.Helper()
	return linkBase(t, k, dev+"/iommu_group")
}

// tool is an op for pcitest: the simulated tool run with args.
func tool(k *Kernel, name string, args ...string) func() error {
	return func() error {
		_, err := k.RunTool(context.Background(), name, args...)
		return err
	}
}

// openDevice opens the device node p as OpenDevice does, failing the test
// if it cannot.
func openDevice(t testing.TB, k *Kernel, p string) io.Closer {
	t.Helper()
	h, err := k.OpenDevice(p)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// openAs opens p on behalf of o as OpenAs does, failing the test if it
// cannot.
func openAs(t testing.TB, k *Kernel, o Opener, p string) *DeviceHandle {
	t.Helper()
	h, err := k.OpenAs(o, p)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// overrideProbe writes override to addr's driver_override, then addr to
// drivers_probe, and returns the driver addr is on after.
func overrideProbe(t testing.TB, k *Kernel, addr, override string) string {
	t.Helper()
	write(t, k, devPath(addr, "driver_override"), override)
	write(t, k, "/sys/bus/pci/drivers_probe", addr)
	return driverOf(k, addr)
}

// toVFIO moves addr from driver from to vfio-pci the measured way:
// driver_override, unbind, drivers_probe. It returns the group's node.
func toVFIO(t testing.TB, k *Kernel, addr, from string) string {
	t.Helper()
	write(t, k, devPath(addr, "driver_override"), "vfio-pci")
	write(t, k, "/sys/bus/pci/drivers/"+from+"/unbind", addr)
	write(t, k, "/sys/bus/pci/drivers_probe", addr)
	if d := driverOf(k, addr); d != DrvVFIOPCI {
		t.Fatalf("%s on %q after drivers_probe, want vfio-pci", addr, d)
	}
	return "/dev/vfio/" + groupOf(t, k, devPath(addr, ""))
}
