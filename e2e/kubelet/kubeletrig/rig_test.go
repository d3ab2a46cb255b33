package kubeletrig_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/vgpu-project/vgpu/e2e/kubelet/kubeletrig"
	"github.com/vgpu-project/vgpu/e2e/kubelet/toyplugin"
)

const (
	res  = "vgpu.example.org/toy"
	devA = "11111111-1111-1111-1111-111111111111"
	devB = "22222222-2222-2222-2222-222222222222"
)

// wait bounds each step: the kubelet answers in about a second, a loaded
// 2-core machine may take many.
const wait = 2 * time.Minute

// startPlugin starts the toy plugin with devA and devB and waits until
// r's kubelet offers both.
func startPlugin(t *testing.T, r *kubeletrig.Rig) *toyplugin.Plugin {
	t.Helper()
	p, err := toyplugin.Start(toyplugin.Config{Dir: kubeletrig.PluginDir, Resource: res, Devices: []string{devA, devB}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	if err := r.WaitAllocatable(res, []string{devA, devB}, wait); err != nil {
		t.Fatal(err)
	}
	return p
}

// runPod runs a pod asking for one device and returns the device its
// environment names, checking that PodResources lists the same.
func runPod(t *testing.T, r *kubeletrig.Rig, name string) string {
	t.Helper()
	if err := r.RunPod(name, map[string]int64{res: 1}); err != nil {
		t.Fatal(err)
	}
	env, err := r.Env(name, wait)
	if err != nil {
		t.Fatal(err)
	}
	id := env[toyplugin.EnvName(res)]
	if id != devA && id != devB {
		t.Fatalf("pod %s's %s=%q, want one of the plugin's devices; its env: %v", name, toyplugin.EnvName(res), id, env)
	}
	s, err := r.PodResources()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Held("default", kubeletrig.PodName(name), res); !slices.Equal(got, []string{id}) {
		t.Fatalf("PodResources says %s holds %v, its env says %s; holdings %+v", kubeletrig.PodName(name), got, id, s.Holdings)
	}
	return id
}

func other(id string) string {
	if id == devA {
		return devB
	}
	return devA
}

// The plugin's resource reaches a static pod's environment and
// PodResources; a pod that asks for more than is left is refused at
// admission; once a pod is deleted PodResources no longer lists it, and
// its device goes to the next pod.
func TestPodGetsDeviceUntilDeleted(t *testing.T) {
	r := kubeletrig.Start(t)
	p := startPlugin(t, r)
	id := runPod(t, r, "first")
	if got := p.Allocations(); !slices.EqualFunc(got, [][]string{{id}}, slices.Equal[[]string]) {
		t.Fatalf("the plugin's Allocate calls: %v, want [[%s]]", got, id)
	}
	if got := runPod(t, r, "holder"); got != other(id) {
		t.Fatalf("a second pod got %s, which the first holds", got)
	}

	if err := r.RunPod("refused", map[string]int64{res: 1}); err != nil {
		t.Fatal(err)
	}
	var refused *v1.Pod
	deadline := time.Now().Add(wait)
	for refused == nil || refused.Status.Phase != v1.PodFailed {
		if time.Now().After(deadline) {
			t.Fatalf("a pod asking for a device when none is left: %+v, want Failed", refused)
		}
		time.Sleep(100 * time.Millisecond)
		var err error
		if refused, err = r.Pod("refused"); err != nil {
			t.Fatal(err)
		}
	}
	if refused.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(refused.Status.Message, "requested number of devices unavailable") {
		t.Fatalf("the refused pod: reason %q, message %q; want the device manager's UnexpectedAdmissionError", refused.Status.Reason, refused.Status.Message)
	}
	if err := r.DeletePod("refused", wait); err != nil {
		t.Fatal(err)
	}

	if err := r.DeletePod("first", wait); err != nil {
		t.Fatal(err)
	}
	s, err := r.PodResources()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(s.Pods, "default/"+kubeletrig.PodName("first")) || len(s.HeldBy(res, id)) != 0 {
		t.Fatalf("after deletion PodResources lists pods %v, %s held by %v", s.Pods, id, s.HeldBy(res, id))
	}
	if got := runPod(t, r, "next"); got != id {
		t.Fatalf("the next pod got %s, want the deleted pod's %s", got, id)
	}
	if got := len(p.Allocations()); got != 3 {
		t.Fatalf("the plugin's Allocate calls: %v, want three (none for the refused pod)", p.Allocations())
	}
}

// A kubelet restart loses nothing: the running pod keeps its container
// and its device in PodResources, the plugin registers again and is not
// asked to Allocate again, and the other device still goes to a new pod.
func TestKubeletRestartLosesNothing(t *testing.T) {
	r := kubeletrig.Start(t)
	p := startPlugin(t, r)
	id := runPod(t, r, "kept")
	before, err := r.Containers("kept")
	if err != nil {
		t.Fatal(err)
	}

	if err := r.RestartKubelet(); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitRegistrations(2, wait); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitAllocatable(res, []string{devA, devB}, wait); err != nil {
		t.Fatal(err)
	}
	// The new kubelet lists the pod once it has admitted it again.
	if err := r.WaitHeld("kept", res, []string{id}, wait); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	after, err := r.Containers("kept")
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 1 || !slices.Equal(before, after) || after[0].State != "CONTAINER_RUNNING" {
		t.Fatalf("the pod's containers were %+v before the restart and %+v after; want the same one, running", before, after)
	}
	if got := p.Allocations(); len(got) != 1 {
		t.Fatalf("the plugin's Allocate calls: %v, want only the first pod's", got)
	}
	if got := runPod(t, r, "new"); got != other(id) {
		t.Fatalf("a new pod got %s, which the running pod holds", got)
	}
}
