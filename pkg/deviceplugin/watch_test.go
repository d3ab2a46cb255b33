package deviceplugin_test

import (
	"fmt"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/deviceplugin/kubelettest"
)

// TestCarveAndUncarve: a carve of a new profile is a new resource, with
// its vGPUs; a profile no GPU carries any more is withdrawn: its list
// empties and its stream ends.
func TestCarveAndUncarve(t *testing.T) {
	n := startMixed(t)
	n.listed("t4-4q")
	cfg := strings.Replace(n.config(), "t4-4q", "t4-2q", 1)
	if rep, err := n.c.Apply(bg, []byte(cfg), false); err != nil || !rep.OK() {
		t.Fatalf("apply: %+v, %v", rep, err)
	}
	const resT42 = domain + "/t4-2q"
	vs := n.vgpusOf("t4-2q")
	if len(vs) != 8 {
		t.Fatalf("t4-2q: %+v", vs)
	}
	n.kube.WaitList(resT42, "the new profile's 8 vGPUs", kubelettest.AllHealthy(ids(vs)))
	n.kube.Wait("t4-4q withdrawn: empty, then its stream ends", func(s kubelettest.State) bool {
		return len(s.Lists[resT4]) == 0 && s.StreamEnds[resT4] == 1
	})
	n.waitLog("resource withdrawn")
}

// TestListFollowsHolders: a vGPU a libvirt domain reserves leaves the
// list, and comes back when the domain lets it go; one leased to a domain
// migrating in is withdrawn as well.
func TestListFollowsHolders(t *testing.T) {
	n := startMixed(t)
	all := ids(n.listed("t4-4q"))
	const dom = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
	h, err := n.c.Reserve(bg, dom, api.ReserveRequest{Name: "web01", Profile: "t4-4q", Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	n.kube.WaitList(resT4, "the domain's two vGPUs withdrawn", func(l map[string]string) bool {
		_, a := l[h.Allocations[0].VGPU]
		_, b := l[h.Allocations[1].VGPU]
		return len(l) == 2 && !a && !b
	})
	if _, err := n.c.Unreserve(bg, dom, ""); err != nil {
		t.Fatal(err)
	}
	n.kube.WaitList(resT4, "back once the domain let go", kubelettest.AllHealthy(all))
	// A domain migrating in leases one: not the kubelet's to give either.
	const arriving = "8b3c1e6a-2f4d-4a5b-9c7e-0d1f2a3b4c5d"
	l, err := n.c.Lease(bg, arriving, api.LeaseRequest{Name: "db01", Profile: "t4-4q", Count: 1, TTLSeconds: 600})
	if err != nil || len(l.Leases) != 1 {
		t.Fatalf("lease = %+v, %v", l, err)
	}
	n.kube.WaitList(resT4, "the leased vGPU withdrawn", func(l2 map[string]string) bool {
		_, ok := l2[l.Leases[0].VGPU]
		return len(l2) == 3 && !ok
	})
}

// TestGPUOffTheBus: when a GPU falls off the bus (the kernel's uevent),
// its vGPUs are listed unhealthy, the one a pod holds too; when it is back
// and carved again, healthy again, the pod's still the pod's.
func TestGPUOffTheBus(t *testing.T) {
	n := startMixed(t)
	vs := n.listed("l40s-12q")
	if _, err := n.kube.Allocate(resL40S, vs[1].ID); err != nil {
		t.Fatal(err)
	}
	// Its pod runs: a claim no pod lists would be judged gone (and listed
	// unhealthy) once older than the young claims' window.
	n.kube.SetPod("default", "vm", "compute", resL40S, vs[1].ID)
	if err := n.k.WriteFile("/sys/bus/pci/devices/0000:86:00.0/remove", []byte("1")); err != nil {
		t.Fatal(err)
	}
	n.kernelChanged()
	unhealthy := func(l map[string]string) bool {
		if len(l) != len(vs) {
			return false
		}
		for _, h := range l {
			if h != pluginapi.Unhealthy {
				return false
			}
		}
		return true
	}
	n.kube.WaitList(resL40S, "every vGPU unhealthy, none dropped", unhealthy)
	n.waitLog("vGPU gone with its GPU from the bus")
	// Back on the bus: bare, so only the pod's (unhealthy: not there).
	if err := n.k.WriteFile("/sys/bus/pci/rescan", []byte("1")); err != nil {
		t.Fatal(err)
	}
	n.kernelChanged()
	n.kube.WaitList(resL40S, "the pod's vGPU only, unhealthy", func(l map[string]string) bool {
		return len(l) == 1 && l[vs[1].ID] == pluginapi.Unhealthy
	})
	// The next reconcile carves it again: all healthy, the pod's still held.
	if rep, err := n.c.Reconcile(bg); err != nil || !rep.OK() {
		t.Fatalf("reconcile: %+v, %v", rep, err)
	}
	n.kube.WaitList(resL40S, "carved again, all healthy", kubelettest.AllHealthy(ids(vs)))
	held := false
	for _, a := range n.allocations() {
		held = held || a.VGPU == vs[1].ID && a.Pod.Resource == resL40S
	}
	if !held {
		t.Errorf("the pod's vGPU is no longer held: %+v", n.allocations())
	}
}

// TestListLeavesOutsideHolders: a vGPU the ledger does not hold but whose
// VFIO group a process outside vgpud has open is not listed (at the next
// relist: an open wakes nothing), and comes back once it is let go.
func TestListLeavesOutsideHolders(t *testing.T) {
	n, vs, all := mixedListed(t)
	qemu, err := n.k.Open(fmt.Sprintf("/dev/vfio/%d", vs[0].IOMMUGroup))
	if err != nil {
		t.Fatal(err)
	}
	// A change elsewhere makes the plugin relist.
	const dom = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
	h, err := n.c.Reserve(bg, dom, api.ReserveRequest{Name: "web01", Profile: "t4-4q", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	n.kube.WaitList(resT4, "the held vGPU and the reserved one withdrawn", func(l map[string]string) bool {
		_, held := l[vs[0].ID]
		_, reserved := l[h.Allocations[0].VGPU]
		return len(l) == len(all)-2 && !held && !reserved
	})
	if err := qemu.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.c.Unreserve(bg, dom, ""); err != nil {
		t.Fatal(err)
	}
	n.kube.WaitList(resT4, "all back once let go", kubelettest.AllHealthy(all))
}

// TestUseUnknownNotListed: while a process whose open files vgpud cannot
// read (vgpud without CAP_SYS_PTRACE) may hold any vGPU, no free vGPU is
// listed (a pod must never get one a QEMU has open), a pod's own stays,
// one line says why; once its files can be read, those it does not hold
// come back.
func TestUseUnknownNotListed(t *testing.T) {
	n, vs, all := mixedListed(t)
	n.allocateOne(resT4, vs[1].ID, true)
	hidden := simkernel.Opener{PID: 4321, Comm: "qemu-system-x86"}
	qemu, err := n.k.OpenAs(hidden, fmt.Sprintf("/dev/vfio/%d", vs[0].IOMMUGroup))
	if err != nil {
		t.Fatal(err)
	}
	n.k.SetFDsUnreadable(hidden.PID, true)
	// A change elsewhere makes the plugin look again.
	const dom = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
	if _, err := n.c.Reserve(bg, dom, api.ReserveRequest{Name: "web01", Profile: "mi25-4g", Count: 1}); err != nil {
		t.Fatal(err)
	}
	n.kube.WaitList(resT4, "only the pod's own vGPU listed", func(l map[string]string) bool {
		return len(l) == 1 && l[vs[1].ID] == "Healthy"
	})
	n.kube.WaitList(resMI25, "no free MI25 VF listed", func(l map[string]string) bool { return len(l) == 0 })
	n.waitLog("free vGPUs whose use cannot be told are not advertised")
	n.k.SetFDsUnreadable(hidden.PID, false)
	if _, err := n.c.Unreserve(bg, dom, ""); err != nil {
		t.Fatal(err)
	}
	n.kube.WaitList(resT4, "back but the one the process visibly holds", func(l map[string]string) bool {
		_, held := l[vs[0].ID]
		return len(l) == len(all)-1 && !held
	})
	n.waitLog("every free vGPU's use can be told again")
	if err := qemu.Close(); err != nil {
		t.Fatal(err)
	}
}

// mixedListed is vgpud on the mixed host with the kubelet listing every
// T4 vGPU: the node, the T4's vGPUs and their ids.
func mixedListed(t *testing.T) (*node, []api.VGPU, []string) {
	t.Helper()
	n := startMixed(t)
	vs := n.listed("t4-4q")
	return n, vs, ids(vs)
}
