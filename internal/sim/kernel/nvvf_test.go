package simkernel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci/pcitest"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

func l40sVF(i int) string {
	return fmt.Sprintf("0000:86:%02x.%d", (4+i)/8, (4+i)%8)
}

func creatableIDs(t *testing.T, k *Kernel, vf string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(read(t, k, devPath(vf, "nvidia/creatable_vgpu_types")), "\n"), "\n")
	if lines[0] != "ID    : vGPU Name" {
		t.Fatalf("header = %q", lines[0])
	}
	var ids []string
	for _, l := range lines[1:] {
		ids = append(ids, strings.TrimSpace(strings.SplitN(l, ":", 2)[0]))
	}
	return ids
}

func TestL40SPerVFTypes(t *testing.T) {
	k := newHost(t, ModelL40S, l40sAddr)
	sriovManage(t, k, "-e", l40sAddr)
	vf0, vf1, vf2 := l40sVF(0), l40sVF(1), l40sVF(2)
	if vf0 != "0000:86:00.4" || l40sVF(4) != "0000:86:01.0" {
		t.Fatalf("l40sVF helper: %s %s", vf0, l40sVF(4))
	}
	got := read(t, k, devPath(vf0, "nvidia/creatable_vgpu_types"))
	if !strings.HasPrefix(got, "ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n1146  : NVIDIA L40S-2B\n1147  : NVIDIA L40S-1Q\n") ||
		!strings.Contains(got, "\n1155  : NVIDIA L40S-24Q\n1156  : NVIDIA L40S-48Q\n") {
		t.Fatalf("creatable_vgpu_types = %q", got)
	}
	if n := len(creatableIDs(t, k, vf0)); n != 12 {
		t.Fatalf("%d creatable types on an idle GPU, want 12", n)
	}
	if got := read(t, k, devPath(vf0, "nvidia/current_vgpu_type")); got != "0\n" {
		t.Fatalf("current = %q", got)
	}
	g0 := groupOf(t, k, devPath(vf0, ""))
	// The VF is a VFIO device from its probe, but not one that opens yet.
	wantExists(t, k, "/dev/vfio/"+g0, true)
	if _, err := k.OpenDevice("/dev/vfio/" + g0); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("open before a type is set: %v, want ENODEV", err)
	}

	cur := devPath(vf0, "nvidia/current_vgpu_type")
	writeErr(t, k, cur, "abc", syscall.EINVAL)
	writeErr(t, k, cur, "0x47b", syscall.EINVAL) // kstrtol base 10: 1147 in hex is no id
	writeErr(t, k, cur, "0", syscall.EPERM)      // no vGPU to remove
	writeErr(t, k, cur, "9999", syscall.EIO)     // no such type: the RM refuses
	write(t, k, cur, "1155")                     // 24Q
	if got := read(t, k, cur); got != "1155\n" {
		t.Fatalf("current = %q", got)
	}
	if d := driverOf(k, vf0); d != DrvNVIDIA {
		t.Fatalf("VF left nvidia: %q", d)
	}
	writeErr(t, k, cur, "1155", syscall.EPERM) // "vGPU device already created", even of that type
	writeErr(t, k, cur, "1153", syscall.EPERM)
	if ids := creatableIDs(t, k, vf0); len(ids) != 0 {
		t.Errorf("a typed VF lists %v", ids)
	}
	// Siblings: only the 24 GB size, and one more fits.
	if ids := creatableIDs(t, k, vf1); strings.Join(ids, ",") != "1155" {
		t.Errorf("sibling lists %v, want [1155]", ids)
	}
	writeErr(t, k, devPath(vf1, "nvidia/current_vgpu_type"), "1145", syscall.EIO)
	write(t, k, devPath(vf1, "nvidia/current_vgpu_type"), "1155")
	if ids := creatableIDs(t, k, vf2); len(ids) != 0 {
		t.Errorf("full GPU still lists %v", ids)
	}
	writeErr(t, k, devPath(vf2, "nvidia/current_vgpu_type"), "1155", syscall.EIO)

	// Freeing: EBUSY while a VM holds the VF, fine after.
	h := openDevice(t, k, "/dev/vfio/"+g0)
	writeErr(t, k, cur, "0", syscall.EBUSY)
	h.Close()
	write(t, k, cur, "0")
	wantExists(t, k, "/dev/vfio/"+g0, true)
	if ids := creatableIDs(t, k, vf2); strings.Join(ids, ",") != "1155" {
		t.Errorf("after freeing one 24Q, vf2 lists %v", ids)
	}
	write(t, k, devPath(vf1, "nvidia/current_vgpu_type"), "0")
	if n := len(creatableIDs(t, k, vf2)); n != 12 {
		t.Errorf("idle GPU again lists %d types", n)
	}
	writeErr(t, k, cur, "0", syscall.EPERM) // already 0
}

func TestL40SVFRefusesVFIOPCI(t *testing.T) {
	k := newHost(t, ModelL40S, l40sAddr)
	sriovManage(t, k, "-e", l40sAddr)
	vf := l40sVF(0)
	write(t, k, devPath(vf, "driver_override"), "vfio-pci")
	write(t, k, "/sys/bus/pci/drivers/nvidia/unbind", vf)
	wantExists(t, k, devPath(vf, "nvidia"), false)
	writeErr(t, k, "/sys/bus/pci/drivers/vfio-pci/bind", vf, syscall.EINVAL)
	write(t, k, "/sys/bus/pci/drivers_probe", vf) // probe fails quietly
	if d := driverOf(k, vf); d != "" {
		t.Fatalf("driver = %q", d)
	}
	if d := overrideProbe(t, k, vf, "\n"); d != DrvNVIDIA {
		t.Fatalf("back on nvidia: %q", d)
	}
	if got := read(t, k, devPath(vf, "nvidia/current_vgpu_type")); got != "0\n" {
		t.Fatalf("current after rebind = %q", got)
	}
}

func TestL40SDisableFreesTypes(t *testing.T) {
	k := newHost(t, ModelL40S, l40sAddr)
	sriovManage(t, k, "-e", l40sAddr)
	write(t, k, devPath(l40sVF(0), "nvidia/current_vgpu_type"), "1156") // 48Q: the whole GPU
	if ids := creatableIDs(t, k, l40sVF(1)); len(ids) != 0 {
		t.Fatalf("48Q leaves room: %v", ids)
	}
	g := groupOf(t, k, devPath(l40sVF(0), ""))
	h := openDevice(t, k, "/dev/vfio/"+g)
	pcitest.BlocksUntilReleased(t, "sriov-manage -d with a typed VF in use", h, tool(k, sysfs.ToolSriovManage, "-d", l40sAddr))
	wantExists(t, k, devPath(l40sAddr, "virtfn0"), false)
	sriovManage(t, k, "-e", l40sAddr)
	if n := len(creatableIDs(t, k, l40sVF(0))); n != 12 {
		t.Fatalf("after re-enabling, %d types", n)
	}
}

// TestNVIDIASriovManage: the nvidia driver has no sriov_configure, so a
// raw sriov_numvfs write is refused (ENOENT, "does not support SRIOV
// configuration via sysfs"); sriov-manage enables every VF through
// pci-pf-stub, idempotently, and leaves PF and VFs on nvidia.
func TestNVIDIASriovManage(t *testing.T) {
	for _, tt := range []struct {
		model, pf string
		total     int
	}{{ModelL40S, l40sAddr, 32}, {ModelA100, a100Addr, 16}} {
		t.Run(tt.model, func(t *testing.T) {
			k := newHost(t, tt.model, tt.pf)
			writeErr(t, k, devPath(tt.pf, "sriov_numvfs"), "2", syscall.ENOENT)
			wantExists(t, k, "/proc/driver/nvidia/gpus/"+tt.pf+"/unbindLock", true)

			out := sriovManage(t, k, "-e", tt.pf)
			if !strings.Contains(out, "Enabling VFs on "+tt.pf) {
				t.Errorf("output %q", out)
			}
			if got := read(t, k, devPath(tt.pf, "sriov_numvfs")); got != fmt.Sprintf("%d\n", tt.total) {
				t.Fatalf("sriov_numvfs = %q, want every VF", got)
			}
			if d := driverOf(k, tt.pf); d != DrvNVIDIA {
				t.Fatalf("PF on %q after sriov-manage", d)
			}
			for i := 0; i < tt.total; i++ {
				vf := linkBase(t, k, devPath(tt.pf, fmt.Sprintf("virtfn%d", i)))
				if d := driverOf(k, vf); d != DrvNVIDIA {
					t.Fatalf("VF %d on %q", i, d)
				}
			}
			wantExists(t, k, "/sys/bus/pci/drivers/pci-pf-stub/"+tt.pf, false)
			if out := sriovManage(t, k, "-e", tt.pf); !strings.Contains(out, "already has VFs enabled") {
				t.Errorf("second -e: %q", out)
			}
			// Disabling through nvidia is refused the same way.
			writeErr(t, k, devPath(tt.pf, "sriov_numvfs"), "0", syscall.ENOENT)
			sriovManage(t, k, "-d", tt.pf)
			wantExists(t, k, devPath(tt.pf, "virtfn0"), false)
			if d := driverOf(k, tt.pf); d != DrvNVIDIA {
				t.Fatalf("PF on %q after -d", d)
			}
			if out := sriovManage(t, k, "-d", tt.pf); !strings.Contains(out, "already has VFs disabled") {
				t.Errorf("second -d: %q", out)
			}
		})
	}
}

// TestNVIDIAUnbindLock: while an NVML client holds the GPU the driver
// refuses its unbind lock; sriov-manage prints "Cannot obtain unbindLock"
// and, having no set -e, still exits 0 with the GPU untouched.
func TestNVIDIAUnbindLock(t *testing.T) {
	k := newHost(t, ModelL40S, l40sAddr)
	if err := k.SetNVMLClients(l40sAddr, 1); err != nil {
		t.Fatal(err)
	}
	lock := "/proc/driver/nvidia/gpus/" + l40sAddr + "/unbindLock"
	write(t, k, lock, "1")
	if got := read(t, k, lock); got != "0\n" {
		t.Fatalf("unbindLock granted with a client: %q", got)
	}
	out := sriovManage(t, k, "-e", l40sAddr)
	if !strings.Contains(out, "Cannot obtain unbindLock for "+l40sAddr) {
		t.Fatalf("output %q", out)
	}
	if got := read(t, k, devPath(l40sAddr, "sriov_numvfs")); got != "0\n" || driverOf(k, l40sAddr) != DrvNVIDIA {
		t.Fatalf("GPU changed: numvfs %q, driver %q", got, driverOf(k, l40sAddr))
	}
	if err := k.SetNVMLClients(l40sAddr, 0); err != nil {
		t.Fatal(err)
	}
	sriovManage(t, k, "-e", l40sAddr)
	if got := read(t, k, devPath(l40sAddr, "sriov_numvfs")); got != "32\n" {
		t.Fatalf("after the client left: numvfs %q", got)
	}
	if _, err := k.RunTool(context.Background(), "amd-smi"); err == nil {
		t.Fatal("a tool the host lacks ran")
	}
	if _, err := k.RunTool(context.Background(), sysfs.ToolSriovManage, "-x", l40sAddr); err == nil {
		t.Fatal("a usage error exited 0")
	}
}

// vgpu_params, on a typed VF and on a T4 mdev: kept as written (trimmed),
// " " clears, and refused while a VM holds the vGPU (docs/vendors/nvidia.md, "Plugin parameters").
func TestVGPUParams(t *testing.T) {
	k := newHost(t, ModelL40S, l40sAddr)
	sriovManage(t, k, "-e", l40sAddr)
	vf := l40sVF(0)
	write(t, k, devPath(vf, "nvidia/current_vgpu_type"), "1153")
	params := devPath(vf, "nvidia/vgpu_params")
	if got := read(t, k, params); got != "\n" {
		t.Fatalf("fresh vgpu_params = %q", got)
	}
	write(t, k, params, "frame_rate_limiter=0, disable_vnc=1\n")
	if got := read(t, k, params); got != "frame_rate_limiter=0, disable_vnc=1\n" {
		t.Fatalf("vgpu_params = %q", got)
	}
	h, err := k.Open("/dev/vfio/" + groupOf(t, k, devPath(vf, "")))
	if err != nil {
		t.Fatal(err)
	}
	writeErr(t, k, params, "enable_uvm=1", syscall.EBUSY)
	h.Close()
	write(t, k, params, " ")
	if got := read(t, k, params); got != "\n" {
		t.Fatalf("cleared vgpu_params = %q", got)
	}

	t4 := newHost(t, ModelT4, "0000:3b:00.0")
	const u = "6a3c5b8e-1d2f-4e5a-9b7c-0d1e2f3a4b5c"
	write(t, t4, "/sys/class/mdev_bus/0000:3b:00.0/mdev_supported_types/nvidia-232/create", u)
	p := sysfs.MdevDevices + "/" + u + "/nvidia/vgpu_params"
	write(t, t4, p, "frame_rate_limiter=0")
	if got := read(t, t4, p); got != "frame_rate_limiter=0\n" {
		t.Fatalf("mdev vgpu_params = %q", got)
	}
}
