package dmharness_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/e2e/kubelet/dmharness"
	"github.com/vgpu-project/vgpu/e2e/kubelet/podres"
	"github.com/vgpu-project/vgpu/e2e/kubelet/toyplugin"
)

const (
	res  = "vgpu.example.org/toy"
	devA = "11111111-1111-1111-1111-111111111111"
	devB = "22222222-2222-2222-2222-222222222222"
)

// wait bounds every wait here: the device manager reacts in milliseconds,
// a loaded 2-core machine in seconds.
const wait = 30 * time.Second

func startPlugin(t *testing.T, h *dmharness.Harness) *toyplugin.Plugin {
	t.Helper()
	p, err := toyplugin.Start(toyplugin.Config{Dir: h.PluginDir(), Resource: res, Devices: []string{devA, devB}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// admit admits a pod asking for one device and returns the device the
// plugin's env names, checking that the manager holds the same one.
func admit(t *testing.T, h *dmharness.Harness, name string) string {
	t.Helper()
	pod := dmharness.NewPod(name, map[string]int64{res: 1})
	opts, err := h.Admit(pod)
	if err != nil {
		t.Fatalf("admit %s: %v", name, err)
	}
	got := dmharness.Env(opts["ctr"])[toyplugin.EnvName(res)]
	if got != devA && got != devB {
		t.Fatalf("pod %s's env %s=%q, want one of the plugin's devices; env: %v", name, toyplugin.EnvName(res), got, dmharness.Env(opts["ctr"]))
	}
	if held := h.Devices(pod, "ctr", res); !slices.Equal(held, []string{got}) {
		t.Fatalf("the manager holds %v for pod %s, its env says %s", held, name, got)
	}
	return got
}

func other(id string) string {
	if id == devA {
		return devB
	}
	return devA
}

func snapshot(t *testing.T, h *dmharness.Harness) podres.Snapshot {
	t.Helper()
	s, err := podres.Read(context.Background(), h.PodResourcesSocket())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The manager registers the plugin, lists its devices, allocates one per
// pod through the plugin's Allocate, refuses a pod when none is left,
// and frees a deleted pod's device for the next pod; PodResources says
// the same at each step.
func TestRegisterListAllocateFree(t *testing.T) {
	h := dmharness.Start(t)
	p := startPlugin(t, h)
	h.WaitAllocatable(res, []string{devA, devB}, wait)
	if s := snapshot(t, h); !slices.Equal(s.Allocatable[res], []string{devA, devB}) {
		t.Fatalf("PodResources allocatable %v, want both devices", s.Allocatable)
	}

	first := admit(t, h, "first")
	second := admit(t, h, "second")
	if second != other(first) {
		t.Fatalf("second pod got %s, the first holds %s", second, first)
	}
	if got := p.Allocations(); !slices.EqualFunc(got, [][]string{{first}, {second}}, slices.Equal[[]string]) {
		t.Fatalf("plugin's Allocate calls %v, want [[%s] [%s]]", got, first, second)
	}
	s := snapshot(t, h)
	if !slices.Equal(s.Held("default", "first", res), []string{first}) || !slices.Equal(s.Held("default", "second", res), []string{second}) {
		t.Fatalf("PodResources holdings %+v, want first=%s second=%s", s.Holdings, first, second)
	}

	_, err := h.Admit(dmharness.NewPod("third", map[string]int64{res: 1}))
	if err == nil || !strings.Contains(err.Error(), "requested number of devices unavailable") {
		t.Fatalf("a third pod with both devices held: %v, want the manager's 'requested number of devices unavailable'", err)
	}

	h.Delete(dmharness.NewPod("first", nil))
	s = snapshot(t, h)
	if slices.Contains(s.Pods, "default/first") || len(s.HeldBy(res, first)) != 0 {
		t.Fatalf("PodResources still lists the deleted pod: pods %v, %s held by %v", s.Pods, first, s.HeldBy(res, first))
	}
	if got := admit(t, h, "fourth"); got != first {
		t.Fatalf("fourth pod got %s, want the deleted pod's %s", got, first)
	}
}

// A plugin that exits takes its devices out of the healthy set; started
// again, it registers again and the manager keeps what pods hold.
func TestPluginRestart(t *testing.T) {
	h := dmharness.Start(t)
	p := startPlugin(t, h)
	h.WaitAllocatable(res, []string{devA, devB}, wait)
	held := admit(t, h, "held")

	p.Stop()
	h.WaitAllocatable(res, nil, wait)
	if _, err := h.Admit(dmharness.NewPod("while-down", map[string]int64{res: 1})); err == nil {
		t.Fatal("a pod was admitted while the plugin was down")
	}

	p2 := startPlugin(t, h)
	if err := p2.WaitRegistrations(1, wait); err != nil {
		t.Fatal(err)
	}
	h.WaitAllocatable(res, []string{devA, devB}, wait)
	if got := h.Devices(dmharness.NewPod("held", nil), "ctr", res); !slices.Equal(got, []string{held}) {
		t.Fatalf("after the plugin's restart the pod holds %v, want [%s]", got, held)
	}
	if got := admit(t, h, "after"); got != other(held) {
		t.Fatalf("a pod after the plugin's restart got %s, which the first pod holds", got)
	}
}

// A kubelet restart: the new manager reads its checkpoint, removes the
// plugin's socket so that it registers again, keeps the running pod's
// device without a new Allocate, and frees the device of a pod deleted
// while it was down.
func TestManagerRestart(t *testing.T) {
	h := dmharness.Start(t)
	p := startPlugin(t, h)
	h.WaitAllocatable(res, []string{devA, devB}, wait)
	kept := admit(t, h, "kept")
	gone := admit(t, h, "gone")
	calls := len(p.Allocations())

	h.Delete(dmharness.NewPod("gone", nil))
	h.Restart()
	if err := p.WaitRegistrations(2, wait); err != nil {
		t.Fatal(err)
	}
	h.WaitAllocatable(res, []string{devA, devB}, wait)
	if got := len(p.Allocations()); got != calls {
		t.Fatalf("the restarted manager called Allocate %d more times for a running pod", got-calls)
	}
	s := snapshot(t, h)
	if !slices.Equal(s.Held("default", "kept", res), []string{kept}) {
		t.Fatalf("after the restart PodResources says the running pod holds %v, want [%s]", s.Held("default", "kept", res), kept)
	}
	if by := s.HeldBy(res, gone); len(by) != 0 {
		t.Fatalf("the pod deleted while the kubelet was down still holds %s: %v", gone, by)
	}
	if got := admit(t, h, "next"); got != gone {
		t.Fatalf("a new pod got %s, want the deleted pod's %s", got, gone)
	}
}
