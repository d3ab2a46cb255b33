package deviceplugin_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/deviceplugin"
	"github.com/vgpu-project/vgpu/pkg/deviceplugin/kubelettest"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// TestUpdatesMatchFullLists drives random pod claims and frees, domain
// reservations and releases, carves and uncarves, and processes outside
// vgpud opening and closing vGPUs' VFIO groups (some of them with open
// files vgpud cannot read); after each step that changed something the lists the plugin keeps by
// updating the vGPUs each change names are exactly those a full list
// makes, and some steps were such updates.
func TestUpdatesMatchFullLists(t *testing.T) {
	n := newNode(t, "mixed.yaml", mixedGPUs)
	n.every = time.Hour // no full list at a PodResources poll between a step and its check
	var m *deviceplugin.Manager
	n.plugin = func(o engine.PluginOptions) (engine.Runner, error) {
		r, err := deviceplugin.ForDaemon(o)
		m, _ = r.(*deviceplugin.Manager)
		return r, err
	}
	n.start()
	n.listed("t4-4q")
	if m == nil {
		t.Fatal("no device plugin made")
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 1))
	resources := []string{resMI25, resT4, resL40S}
	profiles := []string{"mi25-4g", "t4-4q", "l40s-12q"}
	const dom = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
	type open struct {
		h   *simkernel.DeviceHandle
		pid int
	}
	var opens []open
	pid := 5000
	steps := 120
	if testing.Short() {
		steps = 40
	}
	checked := 0
	for step := range steps {
		// Sometimes a process outside vgpud opens or closes a group
		// first: no Change says so; the next step's must cover it.
		switch rnd.IntN(6) {
		case 0:
			var vfs []api.VGPU
			all, err := n.c.VGPUs(bg)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range all {
				if v.IOMMUGroup >= 0 {
					vfs = append(vfs, v)
				}
			}
			if len(vfs) > 0 {
				v := vfs[rnd.IntN(len(vfs))]
				pid++
				h, err := n.k.OpenAs(simkernel.Opener{PID: pid, Comm: "qemu-outside"}, pci.GroupDevicePath(v.IOMMUGroup))
				if err == nil {
					n.k.SetFDsUnreadable(pid, rnd.IntN(2) == 0)
					opens = append(opens, open{h, pid})
					t.Logf("step %d: pid %d opens %s's group %d", step, pid, v.ID, v.IOMMUGroup)
				}
			}
		case 1:
			if len(opens) > 0 {
				i := rnd.IntN(len(opens))
				n.k.SetFDsUnreadable(opens[i].pid, false)
				if err := opens[i].h.Close(); err != nil {
					t.Fatal(err)
				}
				t.Logf("step %d: pid %d closes", step, opens[i].pid)
				opens = slices.Delete(opens, i, i+1)
			}
		}
		var what string
		var err error
		switch rnd.IntN(7) {
		case 0, 1: // a pod claims one the kubelet sees free
			res := resources[rnd.IntN(len(resources))]
			var free []string
			for id, h := range listOf(n.kube.State(), res) {
				if h == "Healthy" {
					if _, held := n.held(id); !held {
						free = append(free, id)
					}
				}
			}
			if len(free) == 0 {
				continue
			}
			slices.Sort(free)
			id := free[rnd.IntN(len(free))]
			what = "pod claims " + id
			_, err = n.kube.Allocate(res, id)
		case 2, 3: // a pod's or the domain's claim freed
			as := n.allocations()
			if len(as) == 0 {
				continue
			}
			a := as[rnd.IntN(len(as))]
			what = "free " + a.VGPU
			_, err = n.c.Unreserve(bg, a.Claim, a.VGPU)
		case 4: // the domain reserves one
			p := profiles[rnd.IntN(len(profiles))]
			what = "domain reserves a " + p
			_, err = n.c.Reserve(bg, dom, api.ReserveRequest{Name: "web01", Profile: p, Count: 1})
		case 5: // the MI25 carved another way
			p := []string{"mi25-4g", "mi25-2g"}[rnd.IntN(2)]
			what = "carve the MI25 " + p
			_, err = n.c.Carve(bg, api.CarveRequest{GPU: "0000:03:00.0", Profile: p})
		case 6:
			what = "uncarve the MI25"
			_, err = n.c.Uncarve(bg, api.UncarveRequest{GPU: "0000:03:00.0"})
		}
		t.Logf("step %d: %s: %v", step, what, err)
		if err != nil {
			// Refused: no Change, so nothing tells the plugin of the
			// outside opens before it (as on a real host: a QEMU's open
			// is heard with the next change).
			continue
		}
		checked++
		if diff, _, _ := m.CheckUpdates(bg); diff != "" {
			t.Fatalf("step %d (%s): the updated lists differ from a full list: %s", step, what, diff)
		}
	}
	_, inc, full := m.CheckUpdates(bg)
	t.Logf("%d steps checked; %d changes applied by an update, %d by a full list", checked, inc, full)
	if inc == 0 { // claims and frees of VFs are updates; kernel changes (mdev claims, carves) full lists
		t.Errorf("no change of %d checked steps applied by an update (%d full lists): the updates are not used", checked, full)
	}
	for _, o := range opens {
		_ = o.h.Close()
	}
}

// listOf is resource res's list as the kubelet has it: id -> health.
func listOf(s kubelettest.State, res string) map[string]string {
	out := map[string]string{}
	for _, d := range s.Lists[res] {
		out[d.ID] = d.Health
	}
	return out
}
