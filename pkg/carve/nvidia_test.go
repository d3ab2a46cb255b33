package carve_test

import (
	"context"
	"errors"
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
	ctx := context.Background()
	for _, tc := range []struct {
		model, first, second string
		total                int
	}{{"l40s", "l40s-12q", "l40s-24q", 32}, {"a100", "a100-10c", "a100-20c", 16}} {
		t.Run(tc.model, func(t *testing.T) {
			r := newRig(t, tc.model)
			if _, err := r.do(ctx, tc.first, carve.Options{}); err != nil {
				t.Fatal(err)
			}
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
			if _, err := r.do(ctx, tc.second, carve.Options{}); err != nil {
				t.Fatal(err)
			}
			if n := toolRuns(r.rec.Writes()[from:]); n != 0 {
				t.Fatalf("a re-split ran sriov-manage %d times; the VFs serve as they are", n)
			}
			checkCarried(t, r, tc.second)
			if _, err := r.do(ctx, "", carve.Options{}); err != nil {
				t.Fatal(err)
			}
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
		if !errors.Is(err, carve.ErrVendorTool) || !strings.Contains(err.Error(), "unbind lock 3 times: an NVML client") {
			t.Fatalf("err = %v", err)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("more than one line: %q", err)
		}
		if n := toolRuns(r.rec.Writes()); n != 3 {
			t.Errorf("sriov-manage ran %d times, want 3", n)
		}
		if d := sysfstest.Diff(before, snapshot(t, r.k)); d != "" {
			t.Fatalf("the failed carve changed the host:\n%s", d)
		}
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
		if _, err := r.do(ctx, "l40s-12q", carve.Options{}); err != nil {
			t.Fatal(err)
		}
		if err := <-left; err != nil {
			t.Fatal(err)
		}
		if n := toolRuns(r.rec.Writes()); n != 2 {
			t.Errorf("sriov-manage ran %d times, want 2", n)
		}
		checkCarried(t, r, "l40s-12q")
	})
}
