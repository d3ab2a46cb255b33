package deviceplugin_test

import (
	"fmt"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-project/vgpu/pkg/deviceplugin/kubelettest"
)

// held is the ledger's record of vGPU id, if any.
func (n *node) held(id string) (ledgerView, bool) {
	for _, a := range n.allocations() {
		if a.VGPU == id {
			return a, true
		}
	}
	return ledgerView{}, false
}

// waitHeld waits until the ledger's record of id satisfies cond (ok:
// whether id is held at all).
func (n *node) waitHeld(id, what string, cond func(a ledgerView, ok bool) bool) {
	n.t.Helper()
	n.until(func() bool { return cond(n.held(id)) }, func() string {
		return fmt.Sprintf("%s: %s: not within %s; ledger %+v\nlog:\n%s", id, what, patience, n.allocations(), n.log.String())
	})
}

// TestReleaseGonePods: the kubelet's PodResources names the pod that holds
// a vGPU (recorded in the ledger); once the pod is gone from it for the
// grace period, the vGPU is freed, logged, and listed free again. One
// whose VFIO group is open (its VM's QEMU still runs) is kept, said once,
// and freed when it is let go.
func TestReleaseGonePods(t *testing.T) {
	n := newNode(t, "mixed.yaml", mixedGPUs)
	n.grace = 200 * time.Millisecond
	n.start()
	vs := n.listed("t4-4q")
	a, b := vs[0], vs[1]
	for _, v := range []string{a.ID, b.ID} {
		if _, err := n.kube.Allocate(resT4, v); err != nil {
			t.Fatal(err)
		}
	}
	n.kube.SetPod("default", "vm-a", "compute", resT4, a.ID)
	n.kube.SetPod("default", "vm-b", "compute", resT4, b.ID)
	n.waitHeld(a.ID, "named after its pod", func(r ledgerView, ok bool) bool {
		return ok && r.Pod.Name == "vm-a" && r.Pod.Namespace == "default" && r.Pod.Container == "compute" &&
			r.Domain == "pod default/vm-a container compute"
	})
	// b's VM runs: its QEMU holds the VFIO group.
	qemu, err := n.k.Open(fmt.Sprintf("/dev/vfio/%d", b.IOMMUGroup))
	if err != nil {
		t.Fatal(err)
	}
	n.kube.SetPod("default", "vm-a", "", "")
	n.kube.SetPod("default", "vm-b", "", "")
	n.waitHeld(a.ID, "freed once its pod was gone", func(_ ledgerView, ok bool) bool { return !ok })
	n.waitLog("freed the vGPU of a pod gone from the kubelet\" vgpu=" + a.ID)
	n.waitLog("pod gone but its vGPU's VFIO group is open (its VM still runs): kept\" vgpu=" + b.ID)
	n.kube.WaitList(resT4, "a free again, b unhealthy while it waits", func(l map[string]string) bool {
		return l[a.ID] == pluginapi.Healthy && l[b.ID] == pluginapi.Unhealthy
	})
	if _, ok := n.held(b.ID); !ok {
		t.Fatal("b freed while its VFIO group is open")
	}
	time.Sleep(5 * n.every) // more looks: said once
	if c := n.logLines("VFIO group is open", b.ID); c != 1 {
		t.Errorf("the open group was logged %d times, want once", c)
	}
	if err := qemu.Close(); err != nil {
		t.Fatal(err)
	}
	n.waitHeld(b.ID, "freed once its VM let go", func(_ ledgerView, ok bool) bool { return !ok })
	n.kube.WaitList(resT4, "all free", kubelettest.AllHealthy(ids(vs)))
}

// TestReleaseGrace: a pod gone from PodResources keeps its vGPU for the
// grace period, listed unhealthy so the kubelet hands it to no other pod;
// listed again (a kubelet's hiccup), it is the pod's and healthy again.
// A PodResources that does not answer frees nothing.
func TestReleaseGrace(t *testing.T) {
	n := newNode(t, "mixed.yaml", mixedGPUs) // grace: an hour
	n.start()
	vs := n.listed("mi25-4g")
	id := vs[0].ID
	if _, err := n.kube.Allocate(resMI25, id); err != nil {
		t.Fatal(err)
	}
	n.kube.SetPod("kubevirt", "virt-launcher-vm1-x7k2p", "compute", resMI25, id)
	n.waitHeld(id, "named", func(r ledgerView, ok bool) bool { return ok && r.Pod.Name == "virt-launcher-vm1-x7k2p" })
	n.kube.SetPod("kubevirt", "virt-launcher-vm1-x7k2p", "", "")
	n.waitLog("pod gone from the kubelet's PodResources; its vGPU goes after the grace period\" vgpu=" + id)
	n.kube.WaitList(resMI25, "unhealthy while it waits", func(l map[string]string) bool { return l[id] == pluginapi.Unhealthy })
	n.kube.SetPod("kubevirt", "virt-launcher-vm1-x7k2p", "compute", resMI25, id)
	n.kube.WaitList(resMI25, "healthy again", kubelettest.AllHealthy(ids(vs)))
	n.waitLog("pod's vGPU listed by the kubelet again: kept")

	n.kube.FailList(true)
	n.waitLog("cannot ask the kubelet which pods hold vGPUs")
	time.Sleep(5 * n.every)
	if c := n.logCount("cannot ask the kubelet which pods hold vGPUs"); c != 1 {
		t.Errorf("PodResources' failure logged %d times, want once", c)
	}
	if _, ok := n.held(id); !ok {
		t.Fatal("freed while PodResources did not answer")
	}
	n.kube.FailList(false)
	n.waitLog("the kubelet's PodResources answers again")
}

// TestClaimNoPodEverHeld: a claim the kubelet never recorded (the pod was
// deleted while Allocate ran, or the answer was lost) is freed like a gone
// pod's once the grace period is over.
func TestClaimNoPodEverHeld(t *testing.T) {
	n := newNode(t, "mixed.yaml", mixedGPUs)
	n.grace = 100 * time.Millisecond
	n.start()
	vs := n.listed("l40s-12q")
	if _, err := n.kube.Allocate(resL40S, vs[3].ID); err != nil {
		t.Fatal(err)
	}
	n.waitHeld(vs[3].ID, "freed: no pod ever listed it", func(_ ledgerView, ok bool) bool { return !ok })
	n.waitLog("freed the vGPU of a pod gone from the kubelet")
	n.kube.WaitList(resL40S, "free again", kubelettest.AllHealthy(ids(vs)))
}
