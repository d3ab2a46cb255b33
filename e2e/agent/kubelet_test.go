package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/deviceplugin/kubelettest"
)

// kubeHost is a simulated host whose vgpud serves a fake kubelet's device
// manager (pkg/deviceplugin/kubelettest) from the directories of h.dir.
func kubeHost(t *testing.T, gpus string) (*host, *kubelettest.Kubelet) {
	t.Helper()
	h := newHost(t, "mixed.yaml", "")
	k := kubelettest.New(t, filepath.Join(h.dir, "dp"), filepath.Join(h.dir, "podres.sock"))
	k.Patience = 2 * time.Minute // FUSE, race build, a busy machine
	cfg := "version: v1\ngpus:\n" + gpus + "kubernetes:\n  device-plugin: true\n  resource-domain: vgpu.example.org\n" +
		"  device-plugin-dir: " + k.Dir() + "\n  pod-resources-socket: " + k.PodSocket() + "\n"
	if err := os.WriteFile(h.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	h.args = []string{"--collect-grace", "300ms", "--pod-resources-every", "50ms"}
	return h, k
}

func vgpusOf(t *testing.T, h *host, profile string) []string {
	t.Helper()
	vs, err := h.c.VGPUs(bg)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vs {
		if v.Profile == profile {
			out = append(out, v.ID)
		}
	}
	return out
}

// awaitHolding polls vgpud's ledger until cond holds of vGPU id's record.
func awaitHolding(t *testing.T, h *host, id, what string, cond func(a *api.Allocation) bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		hs, err := h.c.Allocations(bg)
		if err == nil {
			var a *api.Allocation
			for i := range hs.Allocations {
				if hs.Allocations[i].VGPU == id {
					a = &hs.Allocations[i]
				}
			}
			if cond(a) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s: not within 2m (%v)", id, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDevicePlugin: the real vgpud on the simulated host registers with
// the kubelet, allocates a T4 mdev to a pod with the variable KubeVirt
// reads, survives a kill -9 (the new vgpud registers again and the pod
// keeps its vGPU) and frees the vGPU once PodResources no longer lists the
// pod. vgpusim's device nodes are plain files: no device spec is given.
func TestDevicePlugin(t *testing.T) {
	const res = "vgpu.example.org/t4-4q"
	h, k := kubeHost(t, "  - address: \"0000:3b:00.0\"\n    profile: t4-4q\n")
	defer saveLog(t, h, "vgpud")
	k.Start()
	h.startAgent()
	ids := vgpusOf(t, h, "t4-4q")
	if len(ids) != 4 {
		t.Fatalf("t4-4q vGPUs: %v", ids)
	}
	k.WaitList(res, "listed", kubelettest.AllHealthy(ids))
	cr, err := k.Allocate(res, ids[2])
	if err != nil {
		t.Fatal(err)
	}
	if got := cr.Envs["MDEV_PCI_RESOURCE_VGPU_EXAMPLE_ORG_T4-4Q"]; got != ids[2] || len(cr.Envs) != 1 {
		t.Errorf("envs = %v", cr.Envs)
	}
	if len(cr.Devices) != 0 {
		t.Errorf("device specs on a simulated host: %v", cr.Devices)
	}
	k.SetPod("default", "mdev", "envdump", res, ids[2])
	awaitHolding(t, h, ids[2], "named after its pod", func(a *api.Allocation) bool {
		return a != nil && a.Pod != nil && a.Pod.Name == "mdev" && a.State == "attached"
	})

	if err := h.agent.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.Wait(30 * time.Second); err != nil {
		t.Fatalf("%v:\n%s", err, h.agent.Out)
	}
	h.c.Close()
	h.startAgent()
	k.Wait("registered again by the new vgpud", func(s kubelettest.State) bool { return s.Registered[res] == 2 })
	k.WaitList(res, "the pod's still listed as the kubelet's", kubelettest.AllHealthy(ids))
	if _, err := k.Allocate(res, ids[2]); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("the pod's vGPU allocated again after the restart: %v", err)
	}

	k.SetPod("default", "mdev", "", "")
	awaitHolding(t, h, ids[2], "freed once its pod was gone", func(a *api.Allocation) bool { return a == nil })
	if !strings.Contains(h.agentOut(), "freed the vGPU of a pod gone from the kubelet") {
		t.Errorf("the release was not logged:\n%s", h.agentOut())
	}
	h.noOpenIntents()
}

// TestKillBetweenClaimAndAnswer kills vgpud in the middle of Allocate and
// starts it again: nothing stays claimed, no intent stays open, and the
// vGPU can be allocated again. Killed between the claim and the answer (a
// T4 mdev's vgpu_params write held in vgpusim), the claim's intent was
// open, so the new vgpud frees the claim at start and says why; killed
// while a drifted VF is made ready (its bind held), before the claim,
// nothing was claimed and the start's reconcile binds the VF.
func TestKillBetweenClaimAndAnswer(t *testing.T) {
	const vf = "0000:03:00.1"
	for _, tc := range []struct {
		name, gpus, profile string
		hold                func(id string) string
		claimed             bool // the kill falls after the claim
	}{
		{"after-claim", "  - address: \"0000:3b:00.0\"\n    profile: t4-4q\n", "t4-4q",
			func(id string) string { return "/sys/bus/mdev/devices/" + id + "/nvidia/vgpu_params" }, true},
		{"while-ready", "  - address: \"0000:03:00.0\"\n    profile: mi25-4g\n", "mi25-4g",
			func(string) string { return "/sys/bus/pci/drivers_probe" }, false},
	} {
		crashOutcomes(t, tc.name, func(t *testing.T, errno string) {
			res := "vgpu.example.org/" + tc.profile
			h, k := kubeHost(t, tc.gpus)
			defer saveLog(t, h, "vgpud")
			k.Start()
			h.startAgent()
			ids := vgpusOf(t, h, tc.profile)
			k.WaitList(res, "listed", kubelettest.AllHealthy(ids))
			id := ids[0]
			if !tc.claimed { // the VF drifts off vfio-pci behind vgpud's back
				id = vf
				if err := h.sim.FS().WriteFile("/sys/bus/pci/drivers/vfio-pci/unbind", []byte(vf)); err != nil {
					t.Fatal(err)
				}
			}
			h.hold(tc.hold(id), 1)
			cut := make(chan error, 1)
			go func() {
				_, err := k.Allocate(res, id)
				cut <- err
			}()
			h.crash(errno)
			if err := <-cut; err == nil {
				t.Fatal("Allocate answered although vgpud was killed before its answer")
			}
			said := strings.Contains(h.agentOut(), "the kubelet never had vgpud's answer")
			if said != tc.claimed {
				t.Errorf("the repair of a claim said: %v, want %v:\n%s", said, tc.claimed, h.agentOut())
			}
			awaitHolding(t, h, id, "not held", func(a *api.Allocation) bool { return a == nil })
			k.Wait("registered again", func(s kubelettest.State) bool { return s.Registered[res] == 2 })
			if _, err := k.Allocate(res, id); err != nil {
				t.Fatalf("allocate %s after the repair: %v", id, err)
			}
			awaitHolding(t, h, id, "held by the new claim", func(a *api.Allocation) bool { return a != nil && a.Pod != nil })
			if got := vgpusOf(t, h, tc.profile); len(got) != 4 {
				t.Errorf("%s vGPUs after the repair: %v", tc.profile, got)
			}
			h.noOpenIntents()
		})
	}
}
