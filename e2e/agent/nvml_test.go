package agent

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvstaterpc"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

const (
	a100    = "0000:ca:00.0"
	cfgNVML = `version: v1
gpus:
  - address: "0000:ca:00.0"
    profile: a100-2-10c
  - address: "0000:86:00.0"
    profile: l40s-12q-fixed
`
)

// TestNVMLOverSocket: vgpud, a process given the vgpusim mount, carves a
// MIG-backed profile and one that sets the vGPU scheduler through the
// simulated host's NVML (the socket under the mount), as it would through
// libnvidia-ml; after a reboot of the host, where none of it persists, its
// next start makes it again.
func TestNVMLOverSocket(t *testing.T) {
	h := newHost(t, "nvidia-nvml.yaml", cfgNVML)
	nv := nvstaterpc.Dial(filepath.Join(h.sim.Mnt, nvstate.SimSocket))
	check := func(when string) {
		t.Helper()
		vs, err := h.c.VGPUs(bg)
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, v := range vs {
			n[v.Profile+"/"+v.State]++
		}
		if n["a100-2-10c/free"] != 3 || n["l40s-12q-fixed/free"] != 4 || len(vs) != 7 {
			t.Fatalf("%s: vGPUs %v, want 3 a100-2-10c and 4 l40s-12q-fixed, free", when, n)
		}
		gis, err := nv.Instances(pci.MustParseAddress(a100))
		if err != nil || len(gis) != 3 {
			t.Fatalf("%s: GPU instances %+v, %v; want 3", when, gis, err)
		}
		for _, gi := range gis {
			if gi.ProfileID != 14 { // 2g.10gb on the A100 40GB
				t.Fatalf("%s: GPU instance %+v, want profile 14 (2g.10gb)", when, gi)
			}
		}
		s, err := nv.Scheduler(pci.MustParseAddress(l40s))
		if err != nil || s.Policy != nvstate.PolicyFixedShare || s.TimesliceNS != 2_000_000 {
			t.Fatalf("%s: L40S scheduler %+v, %v; want fixed share, 2 ms", when, s, err)
		}
		if a, err := h.c.Assert(bg, nil); err != nil || !a.Match {
			t.Fatalf("%s: assert = %+v, %v", when, a, err)
		}
	}
	h.startAgent()
	check("first start")

	h.stopAgent()
	h.rebootSim()
	if gis, err := nv.Instances(pci.MustParseAddress(a100)); err != nil || len(gis) != 0 {
		t.Fatalf("after the reboot: GPU instances %+v, %v; want none", gis, err)
	}
	h.startAgent()
	check("after the reboot")

	// Each GPU instance carries a vGPU: NVML refuses to destroy it, and the
	// refusal keeps its meaning across the socket.
	gis, _ := nv.Instances(pci.MustParseAddress(a100))
	for _, gi := range gis {
		if err := nv.Destroy(pci.MustParseAddress(a100), gi.ID); !errors.Is(err, nvstate.ErrInUse) {
			t.Fatalf("destroy GPU instance %d under a vGPU: %v, want mig.ErrInUse", gi.ID, err)
		}
	}
}
