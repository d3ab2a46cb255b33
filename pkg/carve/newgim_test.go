package carve_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// numVFs is the PF's sriov_numvfs as the fake kernel shows it.
func numVFs(t *testing.T, r *rig) int {
	t.Helper()
	g := r.gpuNow(t)
	if g.SRIOV == nil {
		t.Fatal("the GPU shows no SR-IOV")
	}
	return g.SRIOV.NumVFs
}

// New GIM changes its VF count only through amd-smi (never sriov_numvfs,
// which it refuses): carve, re-split, uncarve (gim keeps its VFs) and a
// carve of what is there already, which changes nothing.
func TestNewGIMCarve(t *testing.T) {
	r := newRig(t, "mi300x")
	carveVia(t, r, "mi300x-24g", carve.OpAMDSMINumVF, "set the VF count of 0000:05:00.0 to 8 (amd-smi set --num-vf")
	if p := r.k.AcceleratorPartition(r.gpu.String()); p != "CPX" {
		t.Fatalf("partition %q after the carve to 8 VFs, want CPX", p)
	}
	r.checkSettled(t, "carve again", "mi300x-24g")

	// Re-split: the 8 VFs off vfio-pci, amd-smi to 1, the one VF bound.
	res := r.mustDo(t, "mi300x-192g")
	if got := strings.Count(res.Plan.String(), "unbind"); got != 8 || !hasOp(res.Plan, carve.OpAMDSMINumVF) {
		t.Fatalf("re-split plan (%d unbinds):\n%s", got, res.Plan)
	}
	checkCarried(t, r, "mi300x-192g")
	if p := r.k.AcceleratorPartition(r.gpu.String()); p != "SPX" {
		t.Fatalf("partition %q after the re-split to 1 VF, want SPX", p)
	}

	// Uncarve: the VF leaves vfio-pci; gim keeps it.
	res = r.mustDo(t, "")
	if hasOp(res.Plan, carve.OpAMDSMINumVF) || hasOp(res.Plan, carve.OpNumVFs) || len(res.Plan.Ops) != 1 {
		t.Fatalf("uncarve plan:\n%s", res.Plan)
	}
	g := r.gpuNow(t)
	if g.SRIOV.NumVFs != 1 || g.SRIOV.VFs[0].Driver != "" {
		t.Fatalf("after uncarve: %d VFs, VF 0 on %q", g.SRIOV.NumVFs, g.SRIOV.VFs[0].Driver)
	}
	r.checkSettled(t, "uncarve again", "")
}

// GIM does not save a count amd-smi sets: after a reboot it makes the
// file's again, and the boot re-apply (the same carve) sets it once more.
func TestNewGIMBootReapply(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "mi300x")
	r.mustDo(t, "mi300x-24g")
	host := r.k.Host()
	host.Files = map[string]string{"/etc/gim_config": r.k.GIMConfig()}
	r2 := newRigOn(t, host, r.gpu)
	if n := numVFs(t, r2); n != 1 {
		t.Fatalf("after a reboot gim made %d VFs, want vf_num's 1", n)
	}
	res, err := r2.do(ctx, "mi300x-24g", carve.Options{})
	if err != nil || !hasOp(res.Plan, carve.OpAMDSMINumVF) {
		t.Fatalf("boot re-apply: %v\n%s", err, res.Plan)
	}
	checkCarried(t, r2, "mi300x-24g")
	// An admin who put vf_num=8 in /etc/gim_config gets 8 at boot: the
	// re-apply only binds them.
	host.Files = map[string]string{"/etc/gim_config": "vf_num=8\naccelerator_partition_mode=8\nmemory_partition_mode=4\n"}
	r3 := newRigOn(t, host, r.gpu)
	res, err = r3.do(ctx, "mi300x-24g", carve.Options{})
	if err != nil || hasOp(res.Plan, carve.OpAMDSMINumVF) || len(res.Plan.Ops) != 8 {
		t.Fatalf("re-apply with vf_num=8 saved: %v\n%s", err, res.Plan)
	}
	checkCarried(t, r3, "mi300x-24g")
}

// A VF a VM holds blocks the count change, naming the VF, and changes
// nothing; a carve that keeps the count is still allowed.
func TestNewGIMRefusesInUse(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "mi300x")
	r.mustDo(t, "mi300x-24g")
	vf := r.gpuNow(t).SRIOV.VFs[3]
	hold(t, r.k, pci.GroupDevicePath(vf.IOMMUGroup))
	before := snapshot(t, r.k)
	for _, change := range []string{"mi300x-192g", ""} {
		_, err := r.do(ctx, change, carve.Options{})
		checkBlockedBy(t, fmt.Sprintf("change to %q", change), err, vf.Address.String())
		checkUnchanged(t, "a refused change", before, snapshot(t, r.k))
	}
	r.checkSettled(t, "carve of the same profile with a VF in use", "mi300x-24g")
}

// amd-smi prints its errors and exits 0: a refused or failed change is
// read back from sriov_numvfs and reported in one line with what amd-smi
// said, and the GPU is left as it was.
func TestNewGIMAMDSMIFails(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "mi300x")
	r.mustDo(t, "mi300x-192g")
	before := snapshot(t, r.k)
	r.k.InjectFault(simkernel.Fault{Path: sysfs.DefaultToolPaths()[sysfs.ToolAMDSMI], Nth: 1, Errno: syscall.EIO})
	_, err := r.do(ctx, "mi300x-24g", carve.Options{})
	if !errors.Is(err, carve.ErrVendorTool) || errors.Is(err, carve.ErrUndo) ||
		!strings.Contains(err.Error(), "set the VF count of 0000:05:00.0 to 8 with amd-smi set --num-vf") ||
		!strings.Contains(err.Error(), "the GPU has 1 VFs; amd-smi said: SMI-LIB has returned error -1007 - API call failed. Error code: -1007") ||
		strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %v", err)
	}
	checkUnchanged(t, "a failed amd-smi", before, snapshot(t, r.k))
	checkCarried(t, r, "mi300x-192g")
}
