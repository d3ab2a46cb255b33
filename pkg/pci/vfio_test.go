package pci_test

import (
	"context"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

func TestIOMMUGroup(t *testing.T) {
	k := newHost(t)
	seen := map[int]pci.Address{}
	for _, a := range []pci.Address{plainAddr, s7150Addr, l40sAddr, nvmeAddr} {
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
		members, err := pci.GroupDevices(k, g)
		if err != nil || len(members) != 1 || members[0] != a {
			t.Fatalf("GroupDevices(%d) = %v, %v; want [%s]", g, members, err, a)
		}
	}
	if g, ok, err := pci.IOMMUGroup(k, missing); ok || err != nil || g != -1 {
		t.Fatalf("IOMMUGroup(missing) = %d, %v, %v", g, ok, err)
	}
	if got := pci.GroupDevicePath(12); got != "/dev/vfio/12" {
		t.Fatalf("GroupDevicePath = %q", got)
	}
}

func TestGroupInUse(t *testing.T) {
	k := newHost(t)
	g, _, _ := pci.IOMMUGroup(k, plainAddr)
	node := pci.GroupDevicePath(g)

	// Not on vfio: no node, nobody can hold it.
	if inUse, err := pci.GroupInUse(k, g); err != nil || inUse {
		t.Fatalf("GroupInUse before vfio = %v, %v", inUse, err)
	}
	if err := pci.Bind(context.Background(), k, plainAddr, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	if inUse, err := pci.GroupInUse(k, g); err != nil || inUse {
		t.Fatalf("GroupInUse of a free group = %v, %v", inUse, err)
	}
	if n := k.OpenCount(node); n != 0 {
		t.Fatalf("GroupInUse left %d handles open", n)
	}

	h, err := k.OpenDevice(node) // the VM
	if err != nil {
		t.Fatal(err)
	}
	if inUse, err := pci.GroupInUse(k, g); err != nil || !inUse {
		t.Fatalf("GroupInUse while a VM holds it = %v, %v", inUse, err)
	}
	if n := k.OpenCount(node); n != 1 {
		t.Fatalf("%d handles open, want the VM's only", n)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if inUse, err := pci.GroupInUse(k, g); err != nil || inUse {
		t.Fatalf("GroupInUse after the VM let go = %v, %v", inUse, err)
	}
	// A group that does not exist at all is not in use either.
	if inUse, err := pci.GroupInUse(k, 999); err != nil || inUse {
		t.Fatalf("GroupInUse(999) = %v, %v", inUse, err)
	}
	if _, err := pci.GroupDevices(k, 999); err != nil {
		t.Fatalf("GroupDevices(999) = %v", err)
	}
}

func itoa(n int) string {
	return strings.TrimPrefix(pci.GroupDevicePath(n), "/dev/vfio/")
}
