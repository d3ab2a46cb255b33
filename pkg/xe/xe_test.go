package xe_test

import (
	"errors"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/xe"
)

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]string{"[low] normal\n": "low", "low [normal]": "normal", "low normal [high]\n": "high"} {
		if got, err := xe.ParsePriority(in); err != nil || got != want {
			t.Errorf("ParsePriority(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"low normal", "", "[]"} {
		if _, err := xe.ParsePriority(in); err == nil {
			t.Errorf("ParsePriority(%q) found a choice", in)
		}
	}
}

// On the fake kernel's B50: a VF's profile reads and writes; without
// sriov_admin (before Linux 6.19) the error is ErrNoAdmin.
func TestReadWrite(t *testing.T) {
	pf := pci.MustParseAddress("0000:05:00.0")
	k, err := simkernel.New(simkernel.Host{GPUs: []simkernel.HostGPU{{Model: simkernel.ModelArcB50, Address: pf}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := xe.Write(k, pf, xe.VFFile(pf, 2, xe.ExecQuantum), "25"); err != nil {
		t.Fatal(err)
	}
	if err := xe.Write(k, pf, xe.BulkFile(pf, xe.Priority), "normal"); err != nil {
		t.Fatal(err)
	}
	s, err := xe.ReadVF(k, pf, 2)
	if err != nil || s != (xe.Sched{ExecQuantumMS: 25, Priority: "normal"}) {
		t.Fatalf("ReadVF = %+v, %v", s, err)
	}
	old, err := simkernel.New(simkernel.Host{GPUs: []simkernel.HostGPU{{Model: simkernel.ModelArcB50, Address: pf}}, XeAdmin: simkernel.XeAdminNone})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := xe.ReadVF(old, pf, 1); !errors.Is(err, xe.ErrNoAdmin) {
		t.Fatalf("ReadVF without sriov_admin = %v, want ErrNoAdmin", err)
	}
	if err := xe.Write(old, pf, xe.VFFile(pf, 1, xe.ExecQuantum), "5"); !errors.Is(err, xe.ErrNoAdmin) {
		t.Fatalf("Write without sriov_admin = %v, want ErrNoAdmin", err)
	}
}

// On the fake B50 on Linux 7.0 with xe-vfio-pci: a quota reads back
// rounded up to QuotaAlign; before 7.0 there is none, and without the
// module VFIOLoaded says so.
func TestQuotaAndVFIO(t *testing.T) {
	pf := pci.MustParseAddress("0000:05:00.0")
	host := simkernel.Host{GPUs: []simkernel.HostGPU{{Model: simkernel.ModelArcB50, Address: pf}}, XeAdmin: simkernel.XeAdmin70, XeVFIO: true}
	k, err := simkernel.New(host)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := xe.HasQuota(k, pf); err != nil || !ok {
		t.Fatalf("HasQuota on 7.0 = %v, %v", ok, err)
	}
	if ok, err := xe.VFIOLoaded(k); err != nil || !ok {
		t.Fatalf("VFIOLoaded = %v, %v", ok, err)
	}
	if err := xe.Write(k, pf, xe.VFFile(pf, 3, xe.VRAMQuota), "1"); err != nil {
		t.Fatal(err)
	}
	if q, err := xe.ReadQuota(k, pf, 3); err != nil || q != xe.QuotaAlign {
		t.Fatalf("ReadQuota = %d, %v; want %d", q, err, xe.QuotaAlign)
	}
	host.XeAdmin, host.XeVFIO = "", false
	old, err := simkernel.New(host)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := xe.HasQuota(old, pf); err != nil || ok {
		t.Fatalf("HasQuota on 6.19 = %v, %v", ok, err)
	}
	if ok, err := xe.VFIOLoaded(old); err != nil || ok {
		t.Fatalf("VFIOLoaded without the module = %v, %v", ok, err)
	}
}
