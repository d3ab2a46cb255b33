package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client/clienttest"
)

// TestVgpudGoneDuringCall: a call vgpud does not live to answer says that
// vgpud went away and, for a change (ErrGone), that its restart repairs or
// finishes it; a question (ErrUnavailable) says nothing changed.
func TestVgpudGoneDuringCall(t *testing.T) {
	c := New(clienttest.Vanishing(t, api.PathCarve))
	t.Cleanup(c.Close)
	ctx := context.Background()
	if !c.Available(ctx, 5*time.Second) {
		t.Fatal("the fake vgpud does not answer health")
	}
	changes := map[string]func() error{
		"apply": func() error { _, err := c.Apply(ctx, []byte("version: v1\n"), false); return err },
		"carve": func() error {
			_, err := c.Carve(ctx, api.CarveRequest{GPU: "0000:03:00.0", Profile: "mi25-4g"})
			return err
		},
		"reserve": func() error {
			_, err := c.Reserve(ctx, "4dea22b3-1d52-d8f3-2516-782e98ab3fa0", api.ReserveRequest{Name: "web01", Profile: "t4-4q", Count: 1})
			return err
		},
		"unreserve": func() error { _, err := c.Unreserve(ctx, "4dea22b3-1d52-d8f3-2516-782e98ab3fa0", ""); return err },
	}
	for name, call := range changes {
		err := call()
		if !errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "vgpud went away during the change") ||
			!strings.Contains(err.Error(), "repairs or finishes what was cut short") {
			t.Errorf("%s with vgpud dying under it: %v; want ErrGone saying its restart repairs or finishes the change", name, err)
		}
		if errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: %v matches ErrUnavailable, which says nothing was changed", name, err)
		}
	}
	_, err := c.VGPUs(ctx)
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "vgpud went away") ||
		!strings.Contains(err.Error(), "nothing was changed") {
		t.Errorf("vgpus with vgpud dying under it: %v; want ErrUnavailable saying it went away and nothing was changed", err)
	}
}
