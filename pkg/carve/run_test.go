package carve_test

import (
	"context"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/nvvf"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Run carries out ops in order, and when one fails it undoes those before
// it in reverse: the mdev it made is gone again.
func TestRunUndoesAppliedOpsOnFailure(t *testing.T) {
	r := newRig(t, "t4")
	ctx := context.Background()
	types, err := mdev.Types(r.k, r.gpu.String())
	if err != nil || len(types) == 0 {
		t.Fatalf("types of %s: %v %v", r.gpu, types, err)
	}
	parent, typ := r.gpu.String(), types[0].ID
	const a, b = "11111111-2222-3333-4444-555555555555", "11111111-2222-3333-4444-666666666666"
	ok := []carve.Op{
		{Kind: carve.OpMdevCreate, Parent: parent, Type: typ, UUID: a},
		{Kind: carve.OpNVParams, UUID: a, Value: "frame_rate_limiter=0"},
	}
	n, err := r.c.Run(ctx, vgpu.GPU(r.gpu), ok)
	if err != nil || n != 2 {
		t.Fatalf("Run = %d, %v; want 2, nil", n, err)
	}
	got, err := sysfs.ReadString(r.k, nvvf.ParamsFile(sysfs.MdevDevices+"/"+a))
	if err != nil || got != "frame_rate_limiter=0" {
		t.Fatalf("vgpu_params of %s = %q, %v", a, got, err)
	}

	bad := []carve.Op{
		{Kind: carve.OpMdevRemove, Parent: parent, Type: typ, UUID: a},
		{Kind: carve.OpMdevCreate, Parent: parent, Type: typ, UUID: b},
		{Kind: carve.OpMdevCreate, Parent: parent, Type: "no-such-type", UUID: a},
	}
	n, err = r.c.Run(ctx, vgpu.GPU(r.gpu), bad)
	if err == nil || n != 2 || !strings.Contains(err.Error(), "step 3 of 3") || !strings.Contains(err.Error(), "undone") {
		t.Fatalf("Run = %d, %v; want a failure at step 3, undone", n, err)
	}
	if _, there, err := mdev.Get(r.k, b); err != nil || there {
		t.Errorf("mdev %s made by step 2 still exists (%v) after the undo", b, err)
	}
	if in, there, err := mdev.Get(r.k, a); err != nil || !there || in.Type != typ {
		t.Errorf("mdev %s removed by step 1 is not back (%+v, %v, %v)", a, in, there, err)
	}
}
