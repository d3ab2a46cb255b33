package daemon

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/nvvf"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

func vgpuIDs(as []api.Allocation) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.VGPU
	}
	return out
}

func TestLifecycleVF(t *testing.T) {
	r := startMixed(t)
	res, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 2})
	if err != nil || len(res.Allocations) != 2 || res.Allocations[0].Kind != "vf" || res.Allocations[0].State != "reserved" {
		t.Fatalf("reserve = %+v, %v", res, err)
	}
	ids := vgpuIDs(res.Allocations)
	again, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 2})
	if err != nil || !slices.Equal(vgpuIDs(again.Allocations), ids) {
		t.Fatalf("reserve again = %+v, %v (want the same %v)", again, err, ids)
	}
	// Another domain cannot prepare with them; 2 are left for it.
	_, err = r.c.Prepare(bg, domB, api.PrepareRequest{Name: "db01", Profile: "mi25-4g", VGPUs: ids[:1]})
	wantErr(t, err, client.ErrConflict, "prepare with another domain's VF")
	_, err = r.c.Reserve(bg, domB, api.ReserveRequest{Name: "db01", Profile: "mi25-4g", Count: 3})
	wantErr(t, err, client.ErrNoCapacity, "reserve beyond capacity")
	if !strings.Contains(err.Error(), "0000:03:00.0: 2 of 4 allocated") || !strings.Contains(err.Error(), "mi25-4g") {
		t.Fatalf("capacity message: %v", err)
	}

	// A VF that drifted off vfio-pci is bound again by prepare.
	if err := pci.Unbind(r.k, pci.MustParseAddress(ids[1])); err != nil {
		t.Fatal(err)
	}
	r.d.engine.HostChanged()
	prep, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "mi25-4g", VGPUs: ids})
	if err != nil || len(prep.Allocations) != 2 || prep.Allocations[0].State != "attached" {
		t.Fatalf("prepare = %+v, %v", prep, err)
	}
	if drv, _ := pci.CurrentDriver(r.k, pci.MustParseAddress(ids[1])); drv != "vfio-pci" {
		t.Fatalf("drifted VF on %q after prepare", drv)
	}
	// The VM runs: its QEMU holds the VFIO group of the first VF; the
	// second was unplugged (vgpuctl detach --live) and is free to go.
	grp, ok, err := pci.IOMMUGroup(r.k, pci.MustParseAddress(ids[0]))
	if err != nil || !ok {
		t.Fatalf("IOMMU group of %s: %v", ids[0], err)
	}
	qemu, err := r.k.OpenDevice(pci.GroupDevicePath(grp))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.c.Unreserve(bg, domA, "")
	wantErr(t, err, client.ErrInUse, "unreserve while attached")
	_, err = r.c.Unreserve(bg, domA, ids[0])
	wantErr(t, err, client.ErrInUse, "unreserve of the VF the VM holds")
	live, err := r.c.Unreserve(bg, domA, ids[1])
	if err != nil || len(live.Allocations) != 1 || live.Allocations[0].VGPU != ids[1] {
		t.Fatalf("unreserve of the VF a --live detach unplugged = %+v, %v", live, err)
	}
	if as := r.allocations(); len(as) != 1 || as[0].VGPU != ids[0] || as[0].State != ledger.StateAttached {
		t.Fatalf("allocations after the --live detach: %+v", as)
	}
	if err := qemu.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 2}); err != nil {
		t.Fatal(err)
	}

	rel, err := r.c.Release(bg, domA, api.ReleaseRequest{Name: "web01"})
	if err != nil || rel.Policy != "keep" || len(rel.Kept) != 2 || rel.Kept[0].State != "reserved" {
		t.Fatalf("release = %+v, %v", rel, err)
	}
	one, err := r.c.Unreserve(bg, domA, ids[0])
	if err != nil || len(one.Allocations) != 1 || one.Allocations[0].VGPU != ids[0] {
		t.Fatalf("unreserve one = %+v, %v", one, err)
	}
	_, err = r.c.Unreserve(bg, domA, ids[0])
	wantErr(t, err, client.ErrNotFound, "unreserve of a vGPU not held")
	if _, err := r.c.Unreserve(bg, domA, ""); err != nil {
		t.Fatal(err)
	}
	if as := r.allocations(); len(as) != 0 {
		t.Fatalf("allocations left: %+v", as)
	}
	// A free VF named by a domain XML is allocated by prepare itself.
	prep, err = r.c.Prepare(bg, domB, api.PrepareRequest{Name: "db01", Profile: "mi25-4g", VGPUs: []string{ids[0]}})
	if err != nil || prep.Allocations[0].DomainName != "db01" {
		t.Fatalf("prepare of a free VF = %+v, %v", prep, err)
	}
}

// reservedMdev is vgpud on the mixed host with web01 (domA) holding one
// reserved T4 mdev, carvedM.
func reservedMdev(t *testing.T) (r *rig, carvedM string) {
	t.Helper()
	r = startMixed(t)
	res, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "t4-4q", Count: 1})
	if err != nil || len(res.Allocations) != 1 || res.Allocations[0].Kind != "mdev" {
		t.Fatalf("reserve = %+v, %v", res, err)
	}
	return r, res.Allocations[0].VGPU
}

func TestLifecycleMdevSwap(t *testing.T) {
	r, carvedM := reservedMdev(t)
	prep, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "t4-4q", VGPUs: []string{mdevA0}})
	if err != nil || len(prep.Allocations) != 1 || prep.Allocations[0].VGPU != mdevA0 || prep.Allocations[0].State != "attached" {
		t.Fatalf("prepare = %+v, %v", prep, err)
	}
	if _, ok, _ := mdev.Get(r.k, carvedM); ok {
		t.Fatalf("the reserved mdev %s still exists after the swap", carvedM)
	}
	in, ok, _ := mdev.Get(r.k, mdevA0)
	if !ok || in.Parent != "0000:3b:00.0" || in.Type != "nvidia-232" {
		t.Fatalf("mdev %s after prepare: %+v, %v", mdevA0, in, ok)
	}
	// A second domain without a reservation gets a free mdev swapped in.
	if _, err := r.c.Prepare(bg, domB, api.PrepareRequest{Name: "db01", Profile: "t4-4q", VGPUs: []string{mdevB0}}); err != nil {
		t.Fatal(err)
	}
	insts, _ := mdev.Instances(r.k)
	if len(insts) != 4 {
		t.Fatalf("%d mdevs, want the 4 of t4-4q", len(insts))
	}
	if a, _ := r.c.Assert(bg, nil); !a.Match {
		t.Fatalf("assert after swaps: %+v", a)
	}
	// keep: the identity stays; a restart finds it its own.
	if _, err := r.c.Release(bg, domA, api.ReleaseRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := mdev.Get(r.k, mdevA0); !ok {
		t.Fatal("release (keep) removed the mdev")
	}
	if _, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "t4-4q", VGPUs: []string{mdevA0}}); err != nil {
		t.Fatal(err)
	}
	// Asking for two with one held: the second is swapped in.
	if _, err := r.c.Release(bg, domA, api.ReleaseRequest{}); err != nil {
		t.Fatal(err)
	}
	prep, err = r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "t4-4q", VGPUs: []string{mdevA0, mdevA1}})
	if err != nil || len(prep.Allocations) != 2 {
		t.Fatalf("prepare of two = %+v, %v", prep, err)
	}

	// destroy: mdevs removed, allocations gone, the pool made whole again.
	r.writeConfig(cfgMixedDestroy)
	if _, err := r.d.Reload(bg); err != nil {
		t.Fatal(err)
	}
	rel, err := r.c.Release(bg, domA, api.ReleaseRequest{})
	if err != nil || rel.Policy != "destroy" || len(rel.Destroyed) != 2 || rel.Reconcile == nil || rel.Reconcile.Changed != 1 {
		t.Fatalf("release (destroy) = %+v, %v", rel, err)
	}
	for _, u := range []string{mdevA0, mdevA1} {
		if _, ok, _ := mdev.Get(r.k, u); ok {
			t.Fatalf("mdev %s survived a destroying release", u)
		}
	}
	if insts, _ := mdev.Instances(r.k); len(insts) != 4 {
		t.Fatalf("%d mdevs after the release, want 4: the pool must be whole", len(insts))
	}
	as := r.allocations()
	if len(as) != 1 || as[0].VGPU != mdevB0 {
		t.Fatalf("allocations after the release: %+v", as)
	}
}

func TestReleaseDestroyNVIDIA(t *testing.T) {
	r := start(t, simkernel.NewExample(t, "mixed.yaml"), cfgMixedDestroy)
	res, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "gpu01", Profile: "l40s-12q", Count: 1})
	if err != nil || res.Allocations[0].Kind != "nvidia-vf" {
		t.Fatalf("reserve = %+v, %v", res, err)
	}
	vf := res.Allocations[0].VGPU
	if _, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "gpu01", Profile: "l40s-12q", VGPUs: []string{vf}}); err != nil {
		t.Fatal(err)
	}
	rel, err := r.c.Release(bg, domA, api.ReleaseRequest{})
	if err != nil || len(rel.Cleared) != 1 || len(rel.Kept) != 1 || rel.Kept[0].State != "reserved" {
		t.Fatalf("release = %+v, %v", rel, err)
	}
	if _, cur, _, _ := nvvf.Read(r.k, pci.MustParseAddress(vf)); cur != 0 {
		t.Fatalf("type %d left on %s", cur, vf)
	}
	// The other VFs stay allocatable while this one has no type.
	if _, err := r.c.Reserve(bg, domB, api.ReserveRequest{Name: "gpu02", Profile: "l40s-12q", Count: 3}); err != nil {
		t.Fatal(err)
	}
	// The next start sets the type again.
	prep, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "gpu01", Profile: "l40s-12q", VGPUs: []string{vf}})
	if err != nil || prep.Allocations[0].State != "attached" {
		t.Fatalf("prepare after destroy = %+v, %v", prep, err)
	}
	if _, cur, _, _ := nvvf.Read(r.k, pci.MustParseAddress(vf)); cur != 1153 {
		t.Fatalf("type %d on %s after prepare, want 1153", cur, vf)
	}
}

func TestLeaseBecomesAllocation(t *testing.T) {
	r := startMixed(t)
	// A dry run (vgpuctl migrate --dry-run through the hook) names the
	// vGPU and holds nothing.
	would, err := r.c.Lease(bg, domA, api.LeaseRequest{Name: "mig01", Profile: "t4-4q", Count: 1, TTLSeconds: 60, DryRun: true})
	if err != nil || len(would.Leases) != 1 {
		t.Fatalf("dry-run lease = %+v, %v", would, err)
	}
	if h, _ := r.c.Allocations(bg); len(h.Leases) != 0 {
		t.Fatalf("a dry-run lease holds %+v", h.Leases)
	}
	if _, err := r.c.Lease(bg, domA, api.LeaseRequest{Name: "mig01", Profile: "t4-4q", Count: 64, TTLSeconds: 60, DryRun: true}); !strings.Contains(fmtErr(err), "free on this host") {
		t.Fatalf("dry-run lease of 64: %v", err)
	}
	l, err := r.c.Lease(bg, domA, api.LeaseRequest{Name: "mig01", Profile: "t4-4q", Count: 1, TTLSeconds: 60})
	if err != nil || len(l.Leases) != 1 {
		t.Fatalf("lease = %+v, %v", l, err)
	}
	vs, _ := r.c.VGPUs(bg)
	if countBy(vs, func(v api.VGPU) string { return v.State })["leased"] != 1 {
		t.Fatalf("no leased vGPU listed: %+v", vs)
	}
	// Nobody else gets the leased one.
	if _, err := r.c.Reserve(bg, domB, api.ReserveRequest{Name: "x", Profile: "t4-4q", Count: 4}); !strings.Contains(fmtErr(err), "1 leased") {
		t.Fatalf("reserve over a lease: %v", err)
	}
	prep, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "mig01", Profile: "t4-4q", VGPUs: []string{mdevA0}})
	if err != nil || prep.Allocations[0].VGPU != mdevA0 {
		t.Fatalf("prepare of the migrated domain = %+v, %v", prep, err)
	}
	if _, ok, _ := mdev.Get(r.k, l.Leases[0].VGPU); ok {
		t.Fatal("the leased mdev was not the one swapped")
	}
	h, _ := r.c.Allocations(bg)
	if len(h.Leases) != 0 || len(h.Allocations) != 1 {
		t.Fatalf("holdings after prepare: %+v", h)
	}
	// Dropping leases: a failed migration.
	if _, err := r.c.Lease(bg, domB, api.LeaseRequest{Name: "mig02", Profile: "t4-4q", Count: 2, TTLSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	dropped, err := r.c.DropLeases(bg, domB)
	if err != nil || len(dropped.Leases) != 2 {
		t.Fatalf("drop leases = %+v, %v", dropped, err)
	}
	_ = ledger.StateAttached
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// A forced uncarve that waits in the kernel for a VM to let go of its mdev
// holds no lock the rest of the host needs: another GPU's vGPU is reserved
// and prepared meanwhile. The GPU being changed hands out nothing, its
// vGPUs are not prepared, reconcile and a second change leave it alone;
// once the VM lets go, the uncarve finishes.
// holdT4VGPU gives web01 a t4-4q vGPU, prepared, and opens its VFIO group
// as the domain's QEMU would.
func holdT4VGPU(t *testing.T, r *rig) (id string, qemu io.Closer) {
	t.Helper()
	h, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "t4-4q", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	id = h.Allocations[0].VGPU
	if _, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "t4-4q", VGPUs: []string{id}}); err != nil {
		t.Fatal(err)
	}
	g, ok, err := pci.ReadGroupLink(r.k, "/sys/bus/mdev/devices/"+id+"/iommu_group")
	if err != nil || !ok {
		t.Fatalf("IOMMU group of mdev %s: %v", id, err)
	}
	qemu, err = r.k.Open(pci.GroupDevicePath(g))
	if err != nil {
		t.Fatal(err)
	}
	return id, qemu
}

func TestForcedUncarveDoesNotStall(t *testing.T) {
	r := startMixed(t)
	const t4 = "0000:3b:00.0"
	id, qemu := holdT4VGPU(t, r)
	done := make(chan error, 1)
	go func() {
		_, err := r.c.Uncarve(bg, api.UncarveRequest{GPU: t4, Force: true})
		done <- err
	}()
	for !r.d.engine.Changing(t4) {
		select {
		case err := <-done:
			t.Fatalf("the forced uncarve ended while the VM held its mdev: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}

	// Another GPU's work goes on.
	within := func(what string, f func() error) error {
		t.Helper()
		ch := make(chan error, 1)
		go func() { ch <- f() }()
		select {
		case err := <-ch:
			return err
		case <-time.After(time.Minute):
			t.Fatalf("%s waited behind the forced uncarve", what)
			return nil
		}
	}
	err := within("reserve and prepare on another GPU", func() error {
		h, err := r.c.Reserve(bg, domB, api.ReserveRequest{Name: "db01", Profile: "mi25-4g", Count: 1})
		if err != nil {
			return err
		}
		_, err = r.c.Prepare(bg, domB, api.PrepareRequest{Name: "db01", Profile: "mi25-4g", VGPUs: []string{h.Allocations[0].VGPU}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The GPU being changed: nothing handed out, nothing prepared, left alone.
	if _, err := r.c.Reserve(bg, domC, api.ReserveRequest{Name: "new01", Profile: "t4-4q", Count: 1}); !errors.Is(err, client.ErrNoCapacity) {
		t.Errorf("reserve on the GPU being uncarved: %v, want no capacity", err)
	}
	if _, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "t4-4q", VGPUs: []string{id}}); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "under way") {
		t.Errorf("prepare on the GPU being uncarved: %v, want a conflict", err)
	}
	if _, err := r.c.Uncarve(bg, api.UncarveRequest{GPU: t4, Force: true}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("a second uncarve meanwhile: %v, want a conflict", err)
	}
	var rep api.ReconcileReport
	if err := within("reconcile", func() error { rep, err = r.c.Reconcile(bg); return err }); err != nil {
		t.Fatal(err)
	}
	for _, gr := range rep.GPUs {
		if gr.GPU == t4 && !strings.Contains(gr.Error, "under way") {
			t.Errorf("reconcile of the GPU being uncarved: %+v", gr)
		}
	}

	if err := qemu.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("forced uncarve after the VM let go: %v", err)
	}
	if r.d.engine.Changing(t4) {
		t.Fatal("the GPU stays marked changing")
	}
}

// A forced uncarve through vgpud answers within its wait (ErrPending, 202)
// while the VM holds a vGPU it removes; the uncarve goes on, the GPU stays
// out of other changes, and once the VM lets go it ends on its own.
func TestForcedUncarveAnswersWithinItsWait(t *testing.T) {
	r := newRig(t, simkernel.NewExample(t, "mixed.yaml"), cfgMixed)
	r.forceWait = 200 * time.Millisecond
	r.run()
	const t4 = "0000:3b:00.0"
	id, qemu := holdT4VGPU(t, r)
	start := time.Now()
	_, err := r.c.Uncarve(bg, api.UncarveRequest{GPU: t4, Force: true})
	var ce *client.Error
	if !errors.Is(err, client.ErrPending) || !errors.As(err, &ce) || ce.Status != http.StatusAccepted || !strings.Contains(err.Error(), t4) {
		t.Fatalf("forced uncarve while the VM holds %s: %v; want 202 pending naming %s", id, err, t4)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the answer took %s, not about the 200 ms wait", took)
	}
	if _, err := r.c.Carve(bg, api.CarveRequest{GPU: t4, Profile: "t4-4q"}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("a carve while the forced uncarve goes on: %v, want a conflict", err)
	}
	if err := qemu.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.d.engine.Changing(t4) {
		if time.Now().After(deadline) {
			t.Fatal("the uncarve did not end after the VM let go")
		}
		time.Sleep(10 * time.Millisecond)
	}
	gpus, err := r.c.GPUs(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, gp := range gpus {
		if gp.Address == t4 && gp.Profile != "" {
			t.Errorf("after the uncarve ended the T4 carries %q", gp.Profile)
		}
	}
}
