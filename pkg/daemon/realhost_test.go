package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/inventory"
)

// The API's GPU answer carries what cannot be carved and why, as vgpuctl
// gpus -o json does: the H200 passed through to a VM.
func TestGPUsSayWhyNot(t *testing.T) {
	r := start(t, simkernel.NewExample(t, "h200-guest.yaml"), "")
	gpus, err := r.c.GPUs(context.Background())
	if err != nil || len(gpus) != 1 {
		t.Fatalf("GPUs: %v, %v", gpus, err)
	}
	g := gpus[0]
	why := map[string]string{}
	for _, u := range g.Unavailable {
		why[u.Dialect] = u.Reason
	}
	if len(g.Dialects) != 0 || why[string(inventory.DialectPassthrough)] != inventory.ReasonNoIOMMU ||
		!strings.Contains(why[string(inventory.DialectNVIDIAVF)], "NVIDIA datacenter driver 580.159.04, not the vGPU host driver") {
		t.Errorf("dialects %v, unavailable %v", g.Dialects, g.Unavailable)
	}
}

// Passing the console's GPU through is refused over the API as by vgpuctl
// (409 in-use: --force takes it), and forced it goes through; GPUs passed
// through by the built-in profile are reserved by its name.
func TestCarveConsoleGPU(t *testing.T) {
	r := start(t, simkernel.NewExample(t, "desktop.yaml"), "")
	ctx := context.Background()
	_, err := r.c.Carve(ctx, api.CarveRequest{GPU: "0000:00:02.0", Profile: "passthrough"})
	if !errors.Is(err, client.ErrInUse) || !strings.Contains(err.Error(), "boot_vga") {
		t.Fatalf("carve the console's GPU: %v", err)
	}
	if _, err := r.c.Carve(ctx, api.CarveRequest{GPU: "0000:00:02.0", Profile: "passthrough", Force: true}); err != nil {
		t.Fatalf("forced: %v", err)
	}
	if _, err := r.c.Carve(ctx, api.CarveRequest{GPU: "0000:01:00.0", Profile: "passthrough"}); err != nil {
		t.Fatalf("the RTX 4090, no catalog entry: %v", err)
	}
	// Domains take whole GPUs by the built-in profile's name: the two
	// passed through, and no third.
	h, err := r.c.Reserve(ctx, domA, api.ReserveRequest{Name: "web01", Profile: "passthrough", Count: 2})
	if err != nil || len(h.Allocations) != 2 {
		t.Fatalf("reserve 2 passthrough: %+v, %v", h, err)
	}
	if _, err := r.c.Reserve(ctx, domB, api.ReserveRequest{Name: "db01", Profile: "passthrough", Count: 1}); !errors.Is(err, client.ErrNoCapacity) {
		t.Fatalf("a third: %v, want no capacity", err)
	}
}
