package pci_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

func TestIOMMUGroup(t *testing.T) {
	k := newHost(t)
	seen := map[int]pci.Address{}
	for _, a := range []pci.Address{plainAddr, sriovAddr, l40sAddr, nvmeAddr} {
		g, ok, err := pci.IOMMUGroup(k, a)
		if err != nil || !ok || g < 0 {
			t.Fatalf("IOMMUGroup(%s) = %d, %v, %v", a, g, ok, err)
		}
		if b, dup := seen[g]; dup {
			t.Fatalf("%s and %s share group %d", a, b, g)
		}
		seen[g] = a
		target, err := k.Readlink(pci.DevicePath(a) + "/iommu_group")
		if err != nil || !strings.HasSuffix(target, "/"+itoa(g)) {
			t.Fatalf("group %d does not match the link %q (%v)", g, target, err)
		}
		want := []pci.Address{a}
		if a == plainAddr { // the RTX 3090's HD audio function shares its group
			audio := a
			audio.Function = 1
			want = append(want, audio)
		}
		members, err := pci.GroupDevices(k, g)
		if err != nil || fmt.Sprint(members) != fmt.Sprint(want) {
			t.Fatalf("GroupDevices(%d) = %v, %v; want %v", g, members, err, want)
		}
	}
	if g, ok, err := pci.IOMMUGroup(k, missing); ok || err != nil || g != -1 {
		t.Fatalf("IOMMUGroup(missing) = %d, %v, %v", g, ok, err)
	}
	if got := pci.GroupDevicePath(12); got != "/dev/vfio/12" {
		t.Fatalf("GroupDevicePath = %q", got)
	}
}

// inUse asks as vgpu does: who holds the group's node, from /proc.
func inUse(t *testing.T, f sysfs.FS, a pci.Address, g int) []pci.Holder {
	t.Helper()
	hs, err := pci.ScanHolders(f)
	if err != nil {
		t.Fatal(err)
	}
	of, err := hs.Of(f, pci.DevicePath(a), g)
	if err != nil {
		t.Fatal(err)
	}
	return of
}

func TestScanHoldersNeverOpens(t *testing.T) {
	k := newHost(t)
	rec := &sysfstest.Recorder{FS: k}
	g, _, _ := pci.IOMMUGroup(k, plainAddr)
	node := pci.GroupDevicePath(g)

	if hs := inUse(t, rec, plainAddr, g); len(hs) != 0 {
		t.Fatalf("holders before vfio = %v", hs)
	}
	if err := pci.Bind(context.Background(), k, plainAddr, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	if hs := inUse(t, rec, plainAddr, g); len(hs) != 0 {
		t.Fatalf("holders of a free group = %v", hs)
	}
	h, err := k.OpenDevice(node) // the VM
	if err != nil {
		t.Fatal(err)
	}
	hs := inUse(t, rec, plainAddr, g)
	if len(hs) != 1 || hs[0].Comm != "qemu-system-x86" || hs[0].Node != node || hs[0].PID <= 0 {
		t.Fatalf("holders while a VM holds %s = %+v", node, hs)
	}
	if want := fmt.Sprintf("qemu-system-x86 (pid %d) holds %s", hs[0].PID, node); hs[0].String() != want {
		t.Fatalf("holder reads %q, want %q", hs[0], want)
	}
	// The check itself never opened the node: a QEMU starting meanwhile
	// would have got EBUSY.
	if n := k.OpenCount(node); n != 1 {
		t.Fatalf("%d handles open, want the VM's only", n)
	}
	if opens := rec.Opens(); len(opens) != 0 {
		t.Fatalf("the check opened %v", opens)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if hs := inUse(t, rec, plainAddr, g); len(hs) != 0 {
		t.Fatalf("holders after the VM let go = %v", hs)
	}
	if hs := inUse(t, rec, plainAddr, 999); len(hs) != 0 {
		t.Fatalf("holders of group 999 = %v", hs)
	}
	if _, err := pci.GroupDevices(k, 999); err != nil {
		t.Fatalf("GroupDevices(999) = %v", err)
	}
}

// On a real /proc: an fd on the iommufd cdev of the device counts (QEMU
// with iommufd opens no group node), fds on other files do not, and a
// process whose fd directory vanished (it exited) is skipped.
func TestScanHoldersRealProcLayout(t *testing.T) {
	root := t.TempDir()
	dev := "/sys/bus/pci/devices/0000:03:00.1"
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ln := func(target, p string) {
		mk(filepath.Dir(p))
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		mk(filepath.Dir(p))
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk(dev + "/vfio-dev/vfio3")
	write("/proc/812/comm", "qemu-system-x86\n")
	ln("/dev/null", "/proc/812/fd/0")
	ln("/dev/vfio/devices/vfio3", "/proc/812/fd/27")
	ln("/dev/vfio/vfio", "/proc/812/fd/26")
	write("/proc/90/comm", "sshd\n")
	ln("socket:[1234]", "/proc/90/fd/3")
	mk("/proc/self")                   // not a pid
	write("/proc/77/comm", "exited\n") // no fd directory: gone meanwhile
	f := sysfs.NewOS(root)
	hs := inUse(t, f, pci.MustParseAddress("0000:03:00.1"), 40)
	if len(hs) != 1 || hs[0].PID != 812 || hs[0].Comm != "qemu-system-x86" || hs[0].Node != "/dev/vfio/devices/vfio3" {
		t.Fatalf("holders = %+v; want qemu-system-x86 (812) on /dev/vfio/devices/vfio3", hs)
	}
	if hs := inUse(t, f, pci.MustParseAddress("0000:03:00.2"), 41); len(hs) != 0 {
		t.Fatalf("holders of another device = %+v", hs)
	}
}

func itoa(n int) string {
	return strings.TrimPrefix(pci.GroupDevicePath(n), "/dev/vfio/")
}

// denyLinks is a real /proc whose fd links of pid cannot be read, as for
// root without CAP_SYS_PTRACE on another user's process (readlink: EACCES).
type denyLinks struct {
	sysfs.FS
	pid string
}

func (d denyLinks) Readlink(name string) (string, error) {
	if strings.HasPrefix(name, "/proc/"+d.pid+"/") {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: syscall.EACCES}
	}
	return d.FS.Readlink(name)
}

// A process whose open files cannot be read is named, never taken to hold
// nothing, and the scan still answers for the others: the warning names
// the process and the capability.
func TestScanHoldersNamesUnreadable(t *testing.T) {
	root := t.TempDir()
	for p, target := range map[string]string{"proc/812/fd/27": "/dev/vfio/40", "proc/90/fd/3": "/dev/vfio/41"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "proc", "812", "comm"), []byte("qemu-system-x86\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := denyLinks{sysfs.NewOS(root), "812"}
	hs, err := pci.ScanHolders(f)
	if err != nil {
		t.Fatalf("ScanHolders with one unreadable process: %v", err)
	}
	if len(hs.Unreadable) != 1 || hs.Unreadable[0] != (pci.Process{PID: 812, Comm: "qemu-system-x86"}) {
		t.Fatalf("unreadable = %+v, want qemu-system-x86 (812)", hs.Unreadable)
	}
	if !errors.Is(hs.Why, syscall.EACCES) {
		t.Fatalf("why = %v, want EACCES", hs.Why)
	}
	w := hs.Warning()
	for _, want := range []string{"qemu-system-x86 (pid 812)", "CAP_SYS_PTRACE", "permission denied"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q does not name %q", w, want)
		}
	}
	if of, err := hs.Of(f, "/sys/bus/pci/devices/0000:03:00.1", 41); err != nil || len(of) != 1 || of[0].PID != 90 {
		t.Fatalf("holders of group 41 = %+v, %v; the readable process still shows", of, err)
	}
	if of, _ := hs.Of(f, "/sys/bus/pci/devices/0000:03:00.2", 40); len(of) != 0 {
		t.Fatalf("holders of group 40 = %+v: an unreadable holder cannot show", of)
	}
	all, err := pci.ScanHolders(sysfs.NewOS(root))
	if err != nil || all.Warning() != "" || len(all.Unreadable) != 0 {
		t.Fatalf("a readable /proc: %+v, %v", all, err)
	}
}

// OfGroup answers as OfNode of the group's node does.
func TestHoldersOfGroup(t *testing.T) {
	root := t.TempDir()
	for _, l := range [][2]string{{"/dev/vfio/42", "/proc/812/fd/27"}, {"/dev/vfio/4", "/proc/813/fd/3"}} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(l[1])), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	hs, err := pci.ScanHolders(sysfs.NewOS(root))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []int{4, 42, 420, 0} {
		got, want := hs.OfGroup(g), hs.OfNode(pci.GroupDevicePath(g))
		if len(got) != len(want) || (len(got) == 1 && got[0] != want[0]) {
			t.Errorf("OfGroup(%d) = %+v, OfNode = %+v", g, got, want)
		}
	}
	if hs := hs.OfGroup(42); len(hs) != 1 || hs[0].PID != 812 {
		t.Errorf("OfGroup(42) = %+v, want pid 812", hs)
	}
	if n := testing.AllocsPerRun(10, func() { hs.OfGroup(42) }); n != 0 {
		t.Errorf("OfGroup allocates %v times", n)
	}
}
