package carve_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// TestTargetLock: a GPU's Target takes the GPU's own lock (a swap and a
// carve of the GPU exclude each other), a parent's takes the parent's,
// and the two are apart.
func TestTargetLock(t *testing.T) {
	gpu := pci.MustParseAddress("0000:41:00.0")
	for _, tc := range []struct {
		target vgpu.Target
		name   string
		parent bool
	}{{vgpu.GPU(gpu), "0000:41:00.0", false}, {vgpu.Parent("mbochs"), "mbochs", true}} {
		if got := tc.target.String(); got != tc.name {
			t.Errorf("%+v.String() = %q, want %q", tc.target, got, tc.name)
		}
		if got := tc.target.IsParent(); got != tc.parent {
			t.Errorf("%+v.IsParent() = %v, want %v", tc.target, got, tc.parent)
		}
	}

	l := carve.NewLocker(t.TempDir())
	unlock, err := l.Lock(context.Background(), vgpu.GPU(gpu))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := l.TryLock(gpu); err != nil || ok {
		t.Fatalf("TryLock of the GPU while its Target holds the lock: ok %v, %v; want held", ok, err)
	}
	parent, err := l.Lock(context.Background(), vgpu.Parent("mbochs"))
	if err != nil {
		t.Fatalf("the parent's lock while the GPU's is held: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Lock(ctx, vgpu.Parent("mbochs")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second lock of the parent: %v; want it to wait until the context ends", err)
	}
	parent()
	unlock()
	again, ok, err := l.TryLock(gpu)
	if err != nil || !ok {
		t.Fatalf("TryLock of the GPU once released: ok %v, %v", ok, err)
	}
	again()
}
