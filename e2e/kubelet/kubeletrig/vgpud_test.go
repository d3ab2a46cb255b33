package kubeletrig_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/e2e/kubelet/kubeletrig"
	"github.com/vgpu-project/vgpu/e2e/kubelet/simvgpud"
)

// runVGPUPod runs a static pod asking for one device of res and returns
// the device the variable env names in its container, checking that it
// is one of ids and that PodResources lists the pod with it.
func runVGPUPod(t *testing.T, r *kubeletrig.Rig, name, res, env string, ids []string) string {
	t.Helper()
	if err := r.RunPod(name, map[string]int64{res: 1}); err != nil {
		t.Fatal(err)
	}
	e, err := r.Env(name, wait)
	if err != nil {
		t.Fatal(err)
	}
	id := e[env]
	if !slices.Contains(ids, id) {
		t.Fatalf("pod %s's %s=%q, want one of vgpud's %v; its env: %v", name, env, id, ids, e)
	}
	checkHeld(t, r, name, res, id)
	return id
}

// checkHeld fails the test unless PodResources comes to list pod name
// holding exactly id of res (after a kubelet restart, once the kubelet
// has admitted the pod again).
func checkHeld(t *testing.T, r *kubeletrig.Rig, name, res, id string) {
	t.Helper()
	if err := r.WaitHeld(name, res, []string{id}, wait); err != nil {
		t.Fatal(err)
	}
}

func holder(name, res string) simvgpud.Pod {
	return simvgpud.Pod{Resource: res, Namespace: "default", Name: kubeletrig.PodName(name), Container: "envdump"}
}

// A real kubelet, standalone on containerd, and vgpud on a simulated
// host: static pods asking for a T4 mdev and an MI25 VF get, in their
// environment, the variable KubeVirt reads with the vGPU vgpud's ledger
// gives them; a kubelet restart and a vgpud restart lose nothing (same
// containers, same devices, no new Allocate); a deleted pod's vGPU is
// freed once PodResources no longer lists it.
func TestVgpudServesStaticPods(t *testing.T) {
	bins, err := simvgpud.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := kubeletrig.Start(t)
	v := simvgpud.Start(t, bins, "mixed.yaml", simvgpud.Config,
		simvgpud.Kubelet{PluginDir: kubeletrig.PluginDir, PodResourcesSocket: r.PodResourcesSocket()})
	t4, mi25 := v.WaitCarved("t4-4q"), v.WaitCarved("mi25-4g")
	// A pod admitted before its resource is known runs without it
	// (this module's README.md): wait for both.
	for res, ids := range map[string][]string{simvgpud.ResT4: t4, simvgpud.ResMI25: mi25} {
		if err := r.WaitAllocatable(res, ids, wait); err != nil {
			t.Fatal(err)
		}
	}

	vm := runVGPUPod(t, r, "vm", simvgpud.ResT4, simvgpud.EnvT4, t4)
	vf := runVGPUPod(t, r, "vf", simvgpud.ResMI25, simvgpud.EnvMI25, mi25)
	v.WaitHolder(vm, holder("vm", simvgpud.ResT4))
	v.WaitHolder(vf, holder("vf", simvgpud.ResMI25))
	before, err := r.Containers("vm")
	if err != nil {
		t.Fatal(err)
	}

	// The kubelet restarts: vgpud sees its socket come back and registers
	// both resources again; the pods run on with their devices.
	registered := strings.Count(v.Log(), "registered with the kubelet")
	if err := r.RestartKubelet(); err != nil {
		t.Fatal(err)
	}
	v.WaitLog("kubelet (re)started: registering again", 1, wait)
	v.WaitLog("registered with the kubelet", registered+2, wait)
	if err := r.WaitAllocatable(simvgpud.ResT4, t4, wait); err != nil {
		t.Fatal(err)
	}
	checkHeld(t, r, "vm", simvgpud.ResT4, vm)
	checkHeld(t, r, "vf", simvgpud.ResMI25, vf)
	after, err := r.Containers("vm")
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 1 || !slices.Equal(before, after) || after[0].State != "CONTAINER_RUNNING" {
		t.Fatalf("pod vm's containers were %+v before the kubelet's restart and %+v after; want the same one, running", before, after)
	}
	v.WaitHolder(vm, holder("vm", simvgpud.ResT4))

	// vgpud restarts: it registers again and its ledger still gives each
	// pod its vGPU.
	registered = strings.Count(v.Log(), "registered with the kubelet")
	v.StopVgpud()
	v.StartVgpud()
	v.WaitLog("registered with the kubelet", registered+2, wait)
	v.WaitHolder(vm, holder("vm", simvgpud.ResT4))
	v.WaitHolder(vf, holder("vf", simvgpud.ResMI25))
	checkHeld(t, r, "vm", simvgpud.ResT4, vm)
	if n := strings.Count(v.Log(), "kubelet: allocated"); n != 2 {
		t.Fatalf("vgpud allocated %d times, want 2 (one per pod, none on a restart):\n%s", n, v.Log())
	}

	// The pod is deleted: once PodResources no longer lists it, vgpud
	// frees its vGPU; the other pod keeps its own.
	if err := r.DeletePod("vm", wait); err != nil {
		t.Fatal(err)
	}
	v.WaitLog("freed the vGPU of a pod gone from the kubelet", 1, wait)
	v.WaitHolder(vm, simvgpud.Pod{})
	v.WaitHolder(vf, holder("vf", simvgpud.ResMI25))
}
