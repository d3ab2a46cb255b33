package mdev_test

import (
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// TestTypeCache: types read through a TypeCache are what Types reads
// straight from the kernel, the live counters and instances fresh each
// time; the fixed attributes are read once per registration of the
// parent, and again after the parent's driver is bound anew.
func TestTypeCache(t *testing.T) {
	k := newKernel(t)
	cnt := sysfstest.Count(k)
	cf := mdev.WithTypeCache(cnt, mdev.NewTypeCache())
	typ := typeByName(t, k, t4, "GRID T4-4Q").ID
	same := func(parent string) (fixedReads int) {
		t.Helper()
		cnt.Take()
		got, err := mdev.Types(cf, parent)
		if err != nil {
			t.Fatalf("Types(%s) through the cache: %v", parent, err)
		}
		fixedReads = sysfstest.FixedTypeReads(cnt.Take())
		want, err := mdev.Types(k, parent)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Types(%s) through the cache =\n%+v\nwant\n%+v", parent, got, want)
		}
		return fixedReads
	}
	if n := same(t4); n == 0 {
		t.Fatal("the first read through the cache read no fixed attribute")
	}
	for _, u := range []string{u1, u2} {
		if err := mdev.Create(k, t4, typ, u); err != nil {
			t.Fatal(err)
		}
	}
	if n := same(t4); n != 0 {
		t.Errorf("a second read of the same registration read %d fixed attributes, want 0", n)
	}
	if err := mdev.Remove(k, u1); err != nil {
		t.Fatal(err)
	}
	if n := same(t4); n != 0 {
		t.Errorf("a third read read %d fixed attributes, want 0", n)
	}
	if err := mdev.Remove(k, u2); err != nil {
		t.Fatal(err)
	}
	// The parent bound anew: the driver registers it again.
	if err := k.WriteFile("/sys/bus/pci/devices/"+t4+"/driver/unbind", []byte(t4)); err != nil {
		t.Fatal(err)
	}
	if _, err := mdev.Types(cf, t4); err == nil {
		t.Fatal("Types of an unbound parent through the cache: no error")
	}
	if err := k.WriteFile("/sys/bus/pci/drivers/nvidia/bind", []byte(t4)); err != nil {
		t.Fatal(err)
	}
	if n := same(t4); n == 0 {
		t.Error("after the parent was bound again, the cache read no fixed attribute")
	}
	// A virtual parent, and one whose kernel keeps no inode (not cached).
	same("mbochs")
	got, err := mdev.Types(mdev.WithTypeCache(noIno{k}, mdev.NewTypeCache()), t4)
	if want, _ := mdev.Types(k, t4); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Types through a cache on an FS without inodes = %v, %v; want %v", got, err, want)
	}
}

// noIno is a kernel whose files report no inode numbers.
type noIno struct{ sysfs.FS }

func (f noIno) Stat(name string) (fs.FileInfo, error) {
	fi, err := f.FS.Stat(name)
	if err != nil {
		return nil, err
	}
	return bareInfo{fi}, nil
}

type bareInfo struct{ fs.FileInfo }

func (bareInfo) Sys() any { return nil }

// TestLeanTypes: a lean read is the full read with available_instances
// left Unread, and not read, where the type's description states its
// count (mdev.Counted); a type that states none (mbochs') is read fresh.
func TestLeanTypes(t *testing.T) {
	k := newKernel(t)
	typ := typeByName(t, k, t4, "GRID T4-4Q").ID
	if err := mdev.Create(k, t4, typ, u1); err != nil {
		t.Fatal(err)
	}
	cnt := sysfstest.Count(k)
	lean := mdev.LeanWithTypeCache(cnt, mdev.NewTypeCache())
	for _, parent := range []string{t4, "mbochs"} {
		cnt.Take()
		got, err := mdev.Types(lean, parent)
		if err != nil {
			t.Fatalf("lean Types(%s): %v", parent, err)
		}
		reads := 0
		for _, a := range cnt.Take() {
			if strings.HasSuffix(a.Path, "/available_instances") {
				reads++
			}
		}
		full, err := mdev.Types(k, parent)
		if err != nil {
			t.Fatal(err)
		}
		counted := 0
		for i := range full {
			if mdev.Counted(full[i]) {
				counted++
			} else {
				full[i].AvailableInstances = mdev.Unread
			}
		}
		if !reflect.DeepEqual(got, full) {
			t.Fatalf("lean Types(%s) =\n%+v\nwant\n%+v", parent, got, full)
		}
		if reads != counted {
			t.Errorf("lean Types(%s) read available_instances %d times, want %d (the types that state no count)", parent, reads, counted)
		}
		switch {
		case parent == t4 && counted != 0:
			t.Errorf("%d of the T4's types state no max_instance", counted)
		case parent == "mbochs" && counted == 0:
			t.Error("every mbochs type states a max_instance")
		}
	}
}
