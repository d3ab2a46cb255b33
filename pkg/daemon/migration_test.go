package daemon

import (
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
)

// TestMigrationPhases: begin marks the running domain's vGPUs migrating
// (a carve or another domain cannot take them), rollback gives them back,
// commit frees everything; each phase may be repeated; a migrating domain
// that no longer runs here is freed by the collection.
func TestMigrationPhases(t *testing.T) {
	r := startMixed(t)
	res, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	ids := vgpuIDs(res.Allocations)
	_, err = r.c.Migration(bg, domA, api.MigrationBegin)
	wantErr(t, err, client.ErrConflict, "begin while nothing is attached")
	if _, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "mi25-4g", VGPUs: ids}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		h, err := r.c.Migration(bg, domA, api.MigrationBegin)
		if err != nil || len(h.Allocations) != 2 || h.Allocations[0].State != "migrating" {
			t.Fatalf("begin = %+v, %v", h, err)
		}
	}
	_, err = r.c.Prepare(bg, domB, api.PrepareRequest{Name: "db01", Profile: "mi25-4g", VGPUs: ids[:1]})
	wantErr(t, err, client.ErrConflict, "prepare another domain with a migrating VF")
	_, err = r.c.Uncarve(bg, api.UncarveRequest{GPU: "0000:03:00.0"})
	wantErr(t, err, client.ErrInUse, "uncarve under a migrating domain")
	h, err := r.c.Migration(bg, domA, api.MigrationRollback)
	if err != nil || len(h.Allocations) != 2 || h.Allocations[0].State != "attached" {
		t.Fatalf("rollback = %+v, %v", h, err)
	}
	if _, err := r.c.Migration(bg, domA, api.MigrationBegin); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		h, err := r.c.Migration(bg, domA, api.MigrationCommit)
		if err != nil || len(h.Allocations) != 2-2*i {
			t.Fatalf("commit %d = %+v, %v", i, h, err)
		}
	}
	if _, err := r.c.Migration(bg, domA, "sideways"); err == nil {
		t.Fatal("an unknown phase was accepted")
	}

	// vgpuctl died after the domain left: the collection frees it; while
	// the domain runs here, it is the migration's.
	if _, err := r.c.Reserve(bg, domB, api.ReserveRequest{Name: "db01", Profile: "mi25-4g", Count: 1}); err != nil {
		t.Fatal(err)
	}
	hb, _ := r.c.Allocations(bg)
	if _, err := r.c.Prepare(bg, domB, api.PrepareRequest{Name: "db01", Profile: "mi25-4g", VGPUs: []string{hb.Allocations[0].VGPU}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Migration(bg, domB, api.MigrationBegin); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if rep, err := r.d.engine.Collect(bg, map[string]bool{domB: true}, now.Add(time.Hour), 0); err != nil || len(rep.Freed)+len(rep.Waiting) != 0 {
		t.Fatalf("collect while the migrating domain runs here = %+v, %v", rep, err)
	}
	rep, err := r.d.engine.Collect(bg, map[string]bool{domB: false}, now.Add(time.Hour), 0)
	if err != nil || len(rep.Freed) != 1 {
		t.Fatalf("collect after the migrating domain stopped here = %+v, %v", rep, err)
	}
}

// TestNoFreeWhileMigrating: detach and release refuse a migrating vGPU.
func TestNoFreeWhileMigrating(t *testing.T) {
	r := startMixed(t)
	res, err := r.c.Reserve(bg, domA, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Prepare(bg, domA, api.PrepareRequest{Name: "web01", Profile: "mi25-4g", VGPUs: vgpuIDs(res.Allocations)}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Migration(bg, domA, api.MigrationBegin); err != nil {
		t.Fatal(err)
	}
	_, err = r.c.Unreserve(bg, domA, "")
	wantErr(t, err, client.ErrInUse, "unreserve a migrating domain")
	_, err = r.c.Free(bg, domA, false)
	wantErr(t, err, client.ErrInUse, "release a migrating domain")
	if h, err := r.c.Free(bg, domA, true); err != nil || len(h.Allocations) != 1 {
		t.Fatalf("forced release = %+v, %v", h, err)
	}
}
