package dmharness_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/e2e/kubelet/dmharness"
	"github.com/vgpu-project/vgpu/e2e/kubelet/simvgpud"
)

const (
	resT4, envT4     = simvgpud.ResT4, simvgpud.EnvT4
	resMI25, envMI25 = simvgpud.ResMI25, simvgpud.EnvMI25
)

// vgpuWait bounds waits on vgpud: it lists PodResources every 200ms and
// frees after a 1s grace, but a loaded 2-core machine is slow.
const vgpuWait = 2 * time.Minute

// admitVGPU admits a pod asking for one device of res and returns the
// device the env variable env names, checking that the manager holds it.
func admitVGPU(t *testing.T, h *dmharness.Harness, name, res, env string) string {
	t.Helper()
	pod := dmharness.NewPod(name, map[string]int64{res: 1})
	opts, err := h.Admit(pod)
	if err != nil {
		t.Fatalf("admit %s: %v", name, err)
	}
	id := dmharness.Env(opts["ctr"])[env]
	if held := h.Devices(pod, "ctr", res); id == "" || !slices.Equal(held, []string{id}) {
		t.Fatalf("pod %s: %s=%q, the manager holds %v; env %v", name, env, id, held, dmharness.Env(opts["ctr"]))
	}
	return id
}

// The kubelet's own device manager and vgpud on a simulated host: vgpud
// registers a resource per carved profile with the vGPUs as devices; a
// pod's Allocate gives it the variable KubeVirt reads with the vGPU
// vgpud's ledger gives that pod; a kubelet restart and a vgpud restart
// lose nothing; a pod gone from PodResources has its vGPU freed.
func TestVgpudWithDeviceManager(t *testing.T) {
	bins, err := simvgpud.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := dmharness.Start(t)
	v := simvgpud.Start(t, bins, "mixed.yaml", simvgpud.Config,
		simvgpud.Kubelet{PluginDir: h.PluginDir(), PodResourcesSocket: h.PodResourcesSocket()})
	t4, mi25 := v.WaitCarved("t4-4q"), v.WaitCarved("mi25-4g")
	h.WaitAllocatable(resT4, t4, vgpuWait)
	h.WaitAllocatable(resMI25, mi25, vgpuWait)

	vm := admitVGPU(t, h, "vm", resT4, envT4)
	vf := admitVGPU(t, h, "vf", resMI25, envMI25)
	v.WaitHolder(vm, simvgpud.Pod{Resource: resT4, Namespace: "default", Name: "vm", Container: "ctr"})
	v.WaitHolder(vf, simvgpud.Pod{Resource: resMI25, Namespace: "default", Name: "vf", Container: "ctr"})

	// A kubelet restart: vgpud registers again; the pods keep their vGPUs
	// in the manager and in the ledger.
	h.Restart()
	v.WaitLog("kubelet (re)started: registering again", 1, vgpuWait)
	h.WaitAllocatable(resT4, t4, vgpuWait)
	if got := h.Devices(dmharness.NewPod("vm", nil), "ctr", resT4); !slices.Equal(got, []string{vm}) {
		t.Fatalf("after the kubelet's restart pod vm holds %v, want [%s]", got, vm)
	}
	v.WaitHolder(vm, simvgpud.Pod{Resource: resT4, Namespace: "default", Name: "vm", Container: "ctr"})

	// A vgpud restart: it registers both resources again and keeps its
	// ledger. (The manager keeps a gone plugin's devices healthy for a
	// grace of minutes: allocatable alone would not show the new run.)
	registered := strings.Count(v.Log(), "registered with the kubelet")
	v.StopVgpud()
	v.StartVgpud()
	v.WaitLog("registered with the kubelet", registered+2, vgpuWait)
	h.WaitAllocatable(resT4, t4, vgpuWait)
	h.WaitAllocatable(resMI25, mi25, vgpuWait)
	v.WaitHolder(vm, simvgpud.Pod{Resource: resT4, Namespace: "default", Name: "vm", Container: "ctr"})
	v.WaitHolder(vf, simvgpud.Pod{Resource: resMI25, Namespace: "default", Name: "vf", Container: "ctr"})
	if got := admitVGPU(t, h, "second", resT4, envT4); got == vm {
		t.Fatalf("a second pod got %s, which pod vm holds", got)
	}

	// The pod goes: PodResources stops listing it, vgpud frees its vGPU;
	// the other pods keep theirs.
	h.Delete(dmharness.NewPod("vm", nil))
	v.WaitLog("freed the vGPU of a pod gone from the kubelet", 1, vgpuWait)
	v.WaitHolder(vm, simvgpud.Pod{})
	v.WaitHolder(vf, simvgpud.Pod{Resource: resMI25, Namespace: "default", Name: "vf", Container: "ctr"})
	h.WaitAllocatable(resT4, t4, vgpuWait)
	// Three of the four are free now: vm's among them.
	var got []string
	for _, name := range []string{"after1", "after2", "after3"} {
		got = append(got, admitVGPU(t, h, name, resT4, envT4))
	}
	if !slices.Contains(got, vm) {
		t.Fatalf("the three pods after vm's deletion got %v, not vm's freed %s", got, vm)
	}
}
