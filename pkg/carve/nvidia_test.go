package carve_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// toolRuns counts the vendor tool's runs among writes: each run of
// sriov-manage writes its PF's unbindLock first.
func toolRuns(ws []sysfstest.Write) int {
	n := 0
	for _, w := range ws {
		if w.Tool == sysfs.ToolSriovManage && strings.HasSuffix(w.Path, "/unbindLock") {
			n++
		}
	}
	return n
}

// TestNVIDIAVFsBySriovManage: vgpu never writes an NVIDIA PF's
// sriov_numvfs (the nvidia driver refuses it); sriov-manage enables every
// VF, a re-split keeps them, and an uncarve disables them with it.
func TestNVIDIAVFsBySriovManage(t *testing.T) {
	for _, tc := range []struct {
		model, first, second string
		total                int
	}{{"l40s", "l40s-12q", "l40s-24q", 32}, {"a100", "a100-10c", "a100-20c", 16}} {
		t.Run(tc.model, func(t *testing.T) {
			r := newRig(t, tc.model)
			r.mustDo(t, tc.first)
			for _, w := range r.rec.Writes() {
				if w.Tool == "" && strings.HasSuffix(w.Path, "/sriov_numvfs") {
					t.Fatalf("vgpu wrote %s itself", w.Path)
				}
			}
			if n := toolRuns(r.rec.Writes()); n != 1 {
				t.Fatalf("sriov-manage ran %d times, want 1", n)
			}
			if g := r.gpuNow(t); g.SRIOV.NumVFs != tc.total {
				t.Fatalf("%d VFs, want all %d", g.SRIOV.NumVFs, tc.total)
			}
			from := len(r.rec.Writes())
			r.mustDo(t, tc.second)
			if n := toolRuns(r.rec.Writes()[from:]); n != 0 {
				t.Fatalf("a re-split ran sriov-manage %d times; the VFs serve as they are", n)
			}
			checkCarried(t, r, tc.second)
			r.mustDo(t, "")
			checkCarried(t, r, "")
			if g := r.gpuNow(t); g.Driver != "nvidia" {
				t.Fatalf("PF on %q after uncarve", g.Driver)
			}
		})
	}
}

// TestSriovManageUnbindLock: while an NVML client holds the GPU the carve
// retries sriov-manage, and fails with one line when the client stays.
func TestSriovManageUnbindLock(t *testing.T) {
	ctx := context.Background()
	t.Run("client stays", func(t *testing.T) {
		r := newRig(t, "l40s")
		if err := r.k.SetNVMLClients(r.gpu.String(), 1); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, r.k)
		_, err := r.do(ctx, "l40s-12q", carve.Options{})
		checkRefusal(t, err, carve.ErrVendorTool, "unbind lock 3 times: an NVML client")
		if n := toolRuns(r.rec.Writes()); n != 3 {
			t.Errorf("sriov-manage ran %d times, want 3", n)
		}
		checkUnchanged(t, "the failed carve", before, snapshot(t, r.k))
	})
	t.Run("client leaves", func(t *testing.T) {
		r := newRig(t, "l40s")
		r.c = carve.New(r.rec, r.cat, r.store, carve.WithToolRetry(3, 200*time.Millisecond))
		if err := r.k.SetNVMLClients(r.gpu.String(), 1); err != nil {
			t.Fatal(err)
		}
		// The client leaves once the first try was refused.
		left := make(chan error, 1)
		go func() {
			for toolRuns(r.rec.Writes()) == 0 {
				time.Sleep(time.Millisecond)
			}
			left <- r.k.SetNVMLClients(r.gpu.String(), 0)
		}()
		r.mustDo(t, "l40s-12q")
		if err := <-left; err != nil {
			t.Fatal(err)
		}
		if n := toolRuns(r.rec.Writes()); n != 2 {
			t.Errorf("sriov-manage ran %d times, want 2", n)
		}
		checkCarried(t, r, "l40s-12q")
	})
}
