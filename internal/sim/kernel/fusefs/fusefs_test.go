package fusefs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

const (
	mi25 = "0000:03:00.0"
	t4   = "0000:3b:00.0"
)

func TestMain(m *testing.M) {
	// These tests mount FUSE filesystems: without root or /dev/fuse they
	// cannot say anything, and a silent skip would read as a pass.
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "fusefs tests mount FUSE filesystems and need root: run them with sudo (sudo make test)")
		os.Exit(1)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		fmt.Fprintf(os.Stderr, "fusefs tests need /dev/fuse (modprobe fuse): %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// mountHost serves a kernel with an MI25 and a T4 at a temp dir, unmounted
// when the test ends.
func mountHost(t *testing.T) (*simkernel.Kernel, *Mount, string) {
	t.Helper()
	k := simkernel.NewFor(t, simkernel.Host{GPUs: []simkernel.HostGPU{
		{Model: simkernel.ModelMI25, Address: pci.MustParseAddress(mi25)},
		{Model: simkernel.ModelT4, Address: pci.MustParseAddress(t4)},
	}})
	dir := t.TempDir()
	m, err := New(dir, k)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		lazy, err := m.Unmount()
		if err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
		if lazy {
			t.Errorf("unmount %s: a file was still open, had to detach", dir)
		}
	})
	return k, m, dir
}

func dev(addr, attr string) string { return "/sys/bus/pci/devices/" + addr + "/" + attr }

func writeMnt(mnt, p, v string) error { return sysfs.NewOS(mnt).WriteFile(p, []byte(v)) }

func mustWrite(t *testing.T, mnt, p, v string) {
	t.Helper()
	if err := writeMnt(mnt, p, v); err != nil {
		t.Fatalf("write %q to %s: %v", v, p, err)
	}
}

func readMnt(t *testing.T, mnt, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mnt, p))
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

// bindVF enables n VFs on the MI25 and puts VF 0 on vfio-pci through the
// mount, as a carve does; it returns VF 0's group device path.
func bindVF(t *testing.T, k *simkernel.Kernel, mnt string) string {
	t.Helper()
	mustWrite(t, mnt, dev(mi25, "sriov_numvfs"), "2")
	vf := "0000:03:00.1"
	mustWrite(t, mnt, dev(vf, "driver_override"), "vfio-pci")
	if err := writeMnt(mnt, "/sys/bus/pci/drivers/pci-stub/unbind", vf); err != nil && !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("unbind %s from pci-stub: %v", vf, err)
	}
	mustWrite(t, mnt, "/sys/bus/pci/drivers_probe", vf)
	g, ok, err := pci.IOMMUGroup(k, pci.MustParseAddress(vf))
	if err != nil || !ok {
		t.Fatalf("group of %s: %v (ok %v)", vf, err, ok)
	}
	return pci.GroupDevicePath(g)
}

// TestTreeMatchesKernel: after changes made through the mount, every path,
// link and attribute reads the same through FUSE as in process, with a
// VFIO group held open too.
func TestTreeMatchesKernel(t *testing.T) {
	k, _, mnt := mountHost(t)
	node := bindVF(t, k, mnt)
	mustWrite(t, mnt, "/sys/class/mdev_bus/"+t4+"/mdev_supported_types/nvidia-231/create", "8f7c4c1e-2b7a-4c55-9d2e-6a1f0b3c5d77")
	f, err := os.OpenFile(filepath.Join(mnt, node), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	want, err := sysfstest.Snapshot(k)
	if err != nil {
		t.Fatalf("snapshot in process: %v", err)
	}
	got, err := sysfstest.Snapshot(sysfs.NewOS(mnt))
	if err != nil {
		t.Fatalf("snapshot over FUSE: %v", err)
	}
	if d := sysfstest.Diff(want, got); d != "" {
		t.Fatalf("the mount differs from the kernel:\n%s", d)
	}
	if len(got) < 300 {
		t.Fatalf("snapshot has %d paths; the host has far more", len(got))
	}
}

func TestStatLikeSysfs(t *testing.T) {
	_, _, mnt := mountHost(t)
	tests := []struct {
		path string
		mode os.FileMode
		size int64
	}{
		{dev(mi25, "vendor"), 0o444, 4096},
		{dev(mi25, "sriov_numvfs"), 0o644, 4096},
		{dev(mi25, "remove"), 0o200, 4096},
		{"/sys/bus/pci/devices", os.ModeDir | 0o755, -1},
		{"/sys/bus/pci/devices/" + mi25, os.ModeSymlink | 0o777, -1},
		{"/dev/vfio/vfio", 0o666, 0}, // a regular file over FUSE
	}
	for _, tt := range tests {
		fi, err := os.Lstat(filepath.Join(mnt, tt.path))
		if err != nil {
			t.Errorf("lstat %s: %v", tt.path, err)
			continue
		}
		if fi.Mode() != tt.mode {
			t.Errorf("%s: mode %v, want %v", tt.path, fi.Mode(), tt.mode)
		}
		if tt.size >= 0 && fi.Size() != tt.size {
			t.Errorf("%s: size %d, want %d", tt.path, fi.Size(), tt.size)
		}
	}
	if got, err := os.Readlink(filepath.Join(mnt, dev(mi25, "driver"))); err != nil || got != "../../../../bus/pci/drivers/sriov-standin" {
		t.Errorf("readlink driver = %q, %v", got, err)
	}
}

func TestReadIsOffsetAware(t *testing.T) {
	_, _, mnt := mountHost(t)
	f, err := os.Open(filepath.Join(mnt, dev(mi25, "vendor")))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 3)
	for _, c := range []struct {
		off  int64
		want string
	}{{0, "0x1"}, {3, "002"}, {5, "2\n"}, {7, ""}} {
		n, err := f.ReadAt(buf, c.off)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("pread at %d: %v", c.off, err)
		}
		if got := string(buf[:n]); got != c.want {
			t.Errorf("pread at %d = %q, want %q", c.off, got, c.want)
		}
	}
}

func TestReadSeesEveryChange(t *testing.T) {
	_, _, mnt := mountHost(t)
	p := dev(mi25, "sriov_numvfs")
	for _, n := range []string{"4", "0", "2"} {
		mustWrite(t, mnt, p, n)
		if got := readMnt(t, mnt, p); got != n+"\n" {
			t.Fatalf("after writing %s, read %q", n, got)
		}
	}
	// A VF that went away is gone at once: no cached entry survives.
	mustWrite(t, mnt, p, "0")
	if _, err := os.Stat(filepath.Join(mnt, "/sys/bus/pci/devices/0000:03:00.1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat of a removed VF: %v, want ENOENT", err)
	}
}

// statIno is the inode number stat(2) reports for p under mnt.
func statIno(t *testing.T, mnt, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(mnt, p))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// rebindT4 unbinds the T4 from its driver and binds it again through the
// mount: the driver unregisters the mdev parent and registers it anew.
func rebindT4(t *testing.T, mnt string) {
	t.Helper()
	mustWrite(t, mnt, dev(t4, "driver/unbind"), t4)
	if _, err := os.Stat(filepath.Join(mnt, dev(t4, "mdev_supported_types"))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat mdev_supported_types of an unbound T4: %v, want ENOENT", err)
	}
	mustWrite(t, mnt, "/sys/bus/pci/drivers/nvidia/bind", t4)
}

// TestInodeNewPerNode: as in kernfs, a node keeps its inode number while it
// lives, and a node made again at the same path (the T4's
// mdev_supported_types after a rebind, a VF after SR-IOV is disabled and
// enabled) is a new node with a new number, in stat and in readdir.
func TestInodeNewPerNode(t *testing.T) {
	_, _, mnt := mountHost(t)
	types := dev(t4, "mdev_supported_types")
	first := statIno(t, mnt, types)
	if again := statIno(t, mnt, types); again != first {
		t.Fatalf("inode of %s changed from %d to %d with nothing made again", types, first, again)
	}
	ids, err := os.ReadDir(filepath.Join(mnt, types))
	if err != nil || len(ids) == 0 {
		t.Fatalf("list %s: %v (%d types)", types, err, len(ids))
	}
	// A name file held open across the rebind stays the old node: fstat
	// gives its own inode number, unlinked, not the new file's.
	old, err := os.Open(filepath.Join(mnt, types, ids[0].Name(), "name"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldFi, err := old.Stat()
	if err != nil {
		t.Fatal(err)
	}
	// So is the directory: a removed kernfs directory lists empty and
	// has no children, although its path holds a new one.
	oldDir, err := os.Open(filepath.Join(mnt, types))
	if err != nil {
		t.Fatal(err)
	}
	defer oldDir.Close()
	rebindT4(t, mnt)
	if names, err := oldDir.Readdirnames(-1); err != nil || len(names) != 0 {
		t.Fatalf("readdir of %s opened before the rebind = %v, %v; want empty", types, names, err)
	}
	viaOld := fmt.Sprintf("/proc/self/fd/%d/%s/name", oldDir.Fd(), ids[0].Name())
	if _, err := os.Stat(viaOld); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat %s (a type in the removed directory): %v, want ENOENT", viaOld, err)
	}
	if fi, err := old.Stat(); err != nil {
		t.Fatalf("fstat of a name file removed by the unbind: %v", err)
	} else if st := fi.Sys().(*syscall.Stat_t); st.Ino != oldFi.Sys().(*syscall.Stat_t).Ino || st.Nlink != 0 {
		t.Fatalf("fstat of a removed name file: inode %d links %d, want inode %d links 0", st.Ino, st.Nlink, oldFi.Sys().(*syscall.Stat_t).Ino)
	}
	reopen := fmt.Sprintf("/proc/self/fd/%d", old.Fd())
	if f, err := os.Open(reopen); !errors.Is(err, syscall.ENODEV) {
		if err == nil {
			f.Close()
		}
		t.Fatalf("open %s (the removed name file again): %v, want ENODEV", reopen, err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	second := statIno(t, mnt, types)
	if second == first {
		t.Fatalf("inode of %s is still %d after the T4 was bound anew", types, first)
	}
	ents, err := os.ReadDir(filepath.Join(mnt, dev(t4, "")))
	if err != nil {
		t.Fatal(err)
	}
	var listed uint64
	for _, e := range ents {
		if e.Name() == "mdev_supported_types" {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			listed = fi.Sys().(*syscall.Stat_t).Ino
		}
	}
	if listed != second {
		t.Fatalf("readdir gives %s inode %d, stat %d", types, listed, second)
	}

	vf := "/sys/bus/pci/devices/0000:03:00.1" // stat follows the link to the VF's dir
	mustWrite(t, mnt, dev(mi25, "sriov_numvfs"), "1")
	vfFirst := statIno(t, mnt, vf)
	mustWrite(t, mnt, dev(mi25, "sriov_numvfs"), "0")
	mustWrite(t, mnt, dev(mi25, "sriov_numvfs"), "1")
	if again := statIno(t, mnt, vf); again == vfFirst {
		t.Fatalf("inode of %s is still %d after the VF was made again", vf, vfFirst)
	}
}

// TestTypeCacheSeesRebind: an mdev.TypeCache over the mount reads a type's
// fixed attributes once per registration of the parent, and again after
// the parent is bound anew, because the mount reports the new
// mdev_supported_types directory's new inode number.
func TestTypeCacheSeesRebind(t *testing.T) {
	k, _, mnt := mountHost(t)
	cnt := sysfstest.Count(sysfs.NewOS(mnt))
	cf := mdev.WithTypeCache(cnt, mdev.NewTypeCache())
	fixedReads := func() int {
		t.Helper()
		cnt.Take()
		got, err := mdev.Types(cf, t4)
		if err != nil {
			t.Fatalf("Types(%s) through the cache over FUSE: %v", t4, err)
		}
		want, err := mdev.Types(k, t4)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Types(%s) through the cache over FUSE =\n%+v\nwant\n%+v", t4, got, want)
		}
		return sysfstest.FixedTypeReads(cnt.Take())
	}
	if n := fixedReads(); n == 0 {
		t.Fatal("the first read through the cache read no fixed attribute")
	}
	if n := fixedReads(); n != 0 {
		t.Fatalf("a second read of the same registration read %d fixed attributes, want 0", n)
	}
	rebindT4(t, mnt)
	if n := fixedReads(); n == 0 {
		t.Fatal("after the T4 was bound anew, the cache over FUSE read no fixed attribute")
	}
	if n := fixedReads(); n != 0 {
		t.Fatalf("a second read of the new registration read %d fixed attributes, want 0", n)
	}
}

func TestErrorsAreTheKernelsErrno(t *testing.T) {
	_, _, mnt := mountHost(t)
	numvfs := dev(mi25, "sriov_numvfs")
	tests := []struct {
		name string
		op   func() error
		want syscall.Errno
	}{
		{"above total", func() error { return writeMnt(mnt, numvfs, "99") }, syscall.ERANGE},
		{"not a number", func() error { return writeMnt(mnt, numvfs, "abc") }, syscall.EINVAL},
		{"over a page", func() error { return writeMnt(mnt, dev(mi25, "driver_override"), strings.Repeat("x", 5000)) }, syscall.E2BIG},
		{"write a read-only attribute", func() error { return writeMnt(mnt, dev(mi25, "vendor"), "1") }, syscall.EACCES},
		{"read a write-only attribute", func() error { _, err := os.ReadFile(filepath.Join(mnt, dev(mi25, "remove"))); return err }, syscall.EACCES},
		{"missing attribute", func() error { return writeMnt(mnt, dev(mi25, "nope"), "1") }, syscall.ENOENT},
		{"create a file", func() error {
			return os.WriteFile(filepath.Join(mnt, "/sys/bus/pci/new"), []byte("1"), 0o644)
		}, syscall.EACCES},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(mnt, "/sys/bus/pci/d"), 0o755) }, syscall.EPERM},
		{"unlink", func() error { return os.Remove(filepath.Join(mnt, dev(mi25, "vendor"))) }, syscall.EPERM},
		{"bind a missing device", func() error { return writeMnt(mnt, "/sys/bus/pci/drivers/vfio-pci/bind", "0000:99:00.0") }, syscall.ENODEV},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.op()
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestOneKernelWritePerWrite: each write(2) reaches the kernel once, even
// on one open file and through a truncating open (echo 1 > attr).
func TestOneKernelWritePerWrite(t *testing.T) {
	k, _, mnt := mountHost(t)
	p := dev(mi25, "sriov_numvfs")
	f, err := os.OpenFile(filepath.Join(mnt, p), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"0", "0", "3"} {
		if _, err := f.Write([]byte(v)); err != nil {
			t.Fatalf("write %q: %v", v, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := k.Writes(p); n != 3 {
		t.Fatalf("kernel saw %d writes, want 3", n)
	}
	if got := readMnt(t, mnt, p); got != "3\n" {
		t.Fatalf("sriov_numvfs = %q", got)
	}
}

// waitOpens waits for FUSE's release, which the kernel sends after
// close(2) has returned.
func waitOpens(t *testing.T, k *simkernel.Kernel, p string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for k.OpenCount(p) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d opens, want %d", p, k.OpenCount(p), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestVFIOGroupAdmitsOneOpener(t *testing.T) {
	k, _, mnt := mountHost(t)
	node := bindVF(t, k, mnt)
	f, err := os.OpenFile(filepath.Join(mnt, node), os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open %s: %v", node, err)
	}
	if n := k.OpenCount(node); n != 1 {
		t.Fatalf("open count %d while held", n)
	}
	if _, err := os.OpenFile(filepath.Join(mnt, node), os.O_RDWR, 0); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("second open: %v, want EBUSY", err)
	}
	// The mount's /proc shows this process holding the node, as the real
	// /proc would: vgpu reads it instead of probing the node.
	hs, err := pci.ScanHolders(sysfs.NewOS(mnt))
	if err != nil {
		t.Fatal(err)
	}
	if got := hs.OfNode(node); len(got) != 1 || got[0].PID != os.Getpid() {
		t.Fatalf("holders of %s in the mount's /proc = %+v; want this process (%d)", node, got, os.Getpid())
	}
	// Made unreadable, as to a reader without CAP_SYS_PTRACE: its fd links
	// read EACCES through the mount, and the scan names it.
	k.SetFDsUnreadable(os.Getpid(), true)
	hs, err = pci.ScanHolders(sysfs.NewOS(mnt))
	if err != nil {
		t.Fatal(err)
	}
	if len(hs.OfNode(node)) != 0 || len(hs.Unreadable) != 1 || hs.Unreadable[0].PID != os.Getpid() || !errors.Is(hs.Why, syscall.EACCES) {
		t.Fatalf("scan of an unreadable holder through the mount: %+v", hs)
	}
	k.SetFDsUnreadable(os.Getpid(), false)
	if _, err := f.Read(make([]byte, 8)); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("read on a group: %v, want EINVAL", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	waitOpens(t, k, node, 0)
	g, err := os.OpenFile(filepath.Join(mnt, node), os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open after release: %v", err)
	}
	g.Close()
	waitOpens(t, k, node, 0)
}

func groupOf(t *testing.T, node string) int {
	t.Helper()
	var g int
	if _, err := fmt.Sscanf(node, "/dev/vfio/%d", &g); err != nil {
		t.Fatalf("parse %s: %v", node, err)
	}
	return g
}

// TestBlockingWriteBlocksOnlyItself: sriov_numvfs=0 waits while a VF's
// group is open; meanwhile the rest of the filesystem, the same attribute
// included, answers; closing the group lets the write finish.
func TestBlockingWriteBlocksOnlyItself(t *testing.T) {
	k, _, mnt := mountHost(t)
	node := bindVF(t, k, mnt)
	f, err := os.OpenFile(filepath.Join(mnt, node), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	numvfs := dev(mi25, "sriov_numvfs")
	done := make(chan error, 1)
	go func() { done <- writeMnt(mnt, numvfs, "0") }()
	waitWrites(t, k, numvfs, 2) // bindVF wrote once; this is the second
	select {
	case err := <-done:
		t.Fatalf("sriov_numvfs=0 returned (%v) while a VF's group is open", err)
	case <-time.After(50 * time.Millisecond):
	}
	start := time.Now()
	if got := readMnt(t, mnt, numvfs); got != "2\n" {
		t.Errorf("sriov_numvfs reads %q during the blocked write", got)
	}
	if _, err := os.ReadDir(filepath.Join(mnt, "/sys/bus/pci/devices")); err != nil {
		t.Errorf("readdir during the blocked write: %v", err)
	}
	mustWrite(t, mnt, "/sys/class/mdev_bus/"+t4+"/mdev_supported_types/nvidia-231/create", "8f7c4c1e-2b7a-4c55-9d2e-6a1f0b3c5d77")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("other requests took %v during the blocked write", d)
	}
	f.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("sriov_numvfs=0 after release: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("sriov_numvfs=0 still blocked after the group was closed")
	}
	if got := readMnt(t, mnt, numvfs); got != "0\n" {
		t.Fatalf("sriov_numvfs = %q after the write finished", got)
	}
}

func waitWrites(t *testing.T, k *simkernel.Kernel, p string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for k.Writes(p) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d writes, want %d", p, k.Writes(p), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitHeld(t *testing.T, m *Mount, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := 0
		for _, h := range m.Holds().List() {
			n += h.Waiting
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes held, want %d", n, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHoldReleaseToKernel(t *testing.T) {
	k, m, mnt := mountHost(t)
	numvfs := dev(mi25, "sriov_numvfs")
	// Armed through the real path; the write goes through the bus link.
	real, err := filepath.EvalSymlinks(filepath.Join(mnt, numvfs))
	if err != nil {
		t.Fatal(err)
	}
	m.Holds().Add(Hold{Path: strings.TrimPrefix(real, mnt), Nth: 2})
	mustWrite(t, mnt, numvfs, "0") // the first passes
	done := make(chan error, 1)
	go func() { done <- writeMnt(mnt, numvfs, "4") }()
	waitHeld(t, m, 1)
	if got := readMnt(t, mnt, numvfs); got != "0\n" {
		t.Fatalf("held write took effect: %q", got)
	}
	if n := k.Writes(numvfs); n != 1 {
		t.Fatalf("held write reached the kernel: %d writes", n)
	}
	if n := m.Holds().Release(numvfs, 0); n != 1 {
		t.Fatalf("released %d writes, want 1", n)
	}
	if err := <-done; err != nil {
		t.Fatalf("released write: %v", err)
	}
	if got := readMnt(t, mnt, numvfs); got != "4\n" {
		t.Fatalf("released write had no effect: %q", got)
	}
	if len(m.Holds().List()) != 0 {
		t.Fatal("release left the hold armed")
	}
}

func TestHoldReleaseWithErrno(t *testing.T) {
	k, m, mnt := mountHost(t)
	numvfs := dev(mi25, "sriov_numvfs")
	m.Holds().Add(Hold{Path: numvfs, Always: true})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = writeMnt(mnt, numvfs, "2") }()
	}
	waitHeld(t, m, 2)
	if n := m.Holds().ReleaseAll(syscall.ENOMEM); n != 2 {
		t.Fatalf("released %d, want 2", n)
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, syscall.ENOMEM) {
			t.Errorf("held write %d: %v, want ENOMEM", i, err)
		}
	}
	if n := k.Writes(numvfs); n != 0 {
		t.Fatalf("writes failed at the hold reached the kernel: %d", n)
	}
	if got := readMnt(t, mnt, numvfs); got != "0\n" {
		t.Fatalf("sriov_numvfs = %q", got)
	}
}
