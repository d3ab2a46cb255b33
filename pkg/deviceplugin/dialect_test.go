package deviceplugin_test

import (
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/deviceplugin/kubelettest"
	"github.com/vgpu-project/vgpu/pkg/nvvf"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/xe"
)

// allocateOne has the kubelet allocate vGPU id of res and checks what
// KubeVirt reads (env, the id in MDEV_PCI_RESOURCE_ or PCI_RESOURCE_) and
// the ledger (attached, the pod's resource).
func (n *node) allocateOne(res, id string, mdev bool) {
	n.t.Helper()
	cr, err := n.kube.Allocate(res, id)
	if err != nil {
		n.t.Fatalf("Allocate %s of %s: %v", id, res, err)
	}
	env := "PCI_RESOURCE_"
	if mdev {
		env = "MDEV_PCI_RESOURCE_"
	}
	env += strings.NewReplacer("/", "_", ".", "_").Replace(strings.ToUpper(res))
	if len(cr.Envs) != 1 || cr.Envs[env] != id {
		n.t.Errorf("envs = %v, want %s=%s", cr.Envs, env, id)
	}
	a, ok := n.held(id)
	if !ok || a.State != "attached" || a.Pod.Resource != res {
		n.t.Errorf("ledger after Allocate of %s: %+v (held %v)", id, a, ok)
	}
}

// TestEveryDialect: each way vgpu carves is served: GVT-g mdevs (by
// UUID), Intel xe VFs on xe-vfio-pci and NVIDIA per-VF types (by PCI
// address). A VF that drifted behind vgpud's back (off its VFIO driver,
// its vGPU type cleared) is made ready by Allocate as prepare makes it:
// the NVIDIA VF stays on nvidia with its type set again. (GRID mdevs and
// AMD VFs: TestAllocate; MIG-backed: TestMIGBacked.)
func TestEveryDialect(t *testing.T) {
	t.Run("gvtg", func(t *testing.T) {
		n := newNode(t, "gvtg.yaml", "  - address: \"0000:00:02.0\"\n    profile: gvtg-4\n")
		n.start()
		vs := ids(n.listed("gvtg-4"))
		if len(vs) != 4 {
			t.Fatalf("gvtg-4 vGPUs: %v", vs)
		}
		n.allocateOne(domain+"/gvtg-4", vs[1], true)
	})
	t.Run("xe", func(t *testing.T) {
		pf := pci.MustParseAddress("0000:05:00.0")
		n := newNodeFor(t, simkernel.Host{Version: simkernel.HostVersion, GPUs: []simkernel.HostGPU{{Model: simkernel.ModelArcB50, Address: pf}},
			XeAdmin: simkernel.XeAdmin70, XeVFIO: true}, "  - address: \"0000:05:00.0\"\n    profile: b50-4g-pinned\n")
		k := n.k
		n.start()
		vs := ids(n.listed("b50-4g-pinned"))
		if len(vs) != 4 {
			t.Fatalf("b50-4g-pinned vGPUs: %v", vs)
		}
		vf := pci.MustParseAddress(vs[2])
		if err := pci.Unbind(k, vf); err != nil {
			t.Fatal(err)
		}
		n.allocateOne(domain+"/b50-4g-pinned", vs[2], false)
		if drv, err := pci.CurrentDriver(k, vf); err != nil || drv != xe.VFIODriver {
			t.Errorf("the allocated VF is on %q (%v), want %s", drv, err, xe.VFIODriver)
		}
	})
	t.Run("nvidia-per-vf", func(t *testing.T) {
		n := startMixed(t)
		vs := ids(n.listed("l40s-12q"))
		vf := pci.MustParseAddress(vs[3])
		_, want, _, err := nvvf.Read(n.k, vf)
		if err != nil || want == 0 {
			t.Fatalf("the carved VF's type: %d, %v", want, err)
		}
		if err := nvvf.ClearType(n.k, vf); err != nil {
			t.Fatal(err)
		}
		n.allocateOne(resL40S, vs[3], false)
		if _, cur, _, err := nvvf.Read(n.k, vf); err != nil || cur != want {
			t.Errorf("the allocated VF's vGPU type is %d (%v), want %d", cur, err, want)
		}
		if drv, err := pci.CurrentDriver(n.k, vf); err != nil || drv != "nvidia" {
			t.Errorf("the allocated VF is on %q (%v), want nvidia", drv, err)
		}
	})
}

// TestAllocateFaultUndone: a kernel write that fails after the claim (the
// T4 mdev's vgpu_params) is a gRPC error naming it, and the claim is
// taken back whole: nothing held, the intent ended, the vGPU listed
// healthy and allocatable again. A VF that cannot be made ready (its
// NVIDIA type write fails) claims nothing either.
func TestAllocateFaultUndone(t *testing.T) {
	n := startMixed(t)
	t4 := ids(n.listed("t4-4q"))
	l40s := ids(n.listed("l40s-12q"))

	f := n.k.InjectFault(simkernel.Fault{Path: "/sys/bus/mdev/devices/" + t4[1] + "/nvidia/vgpu_params"})
	_, err := n.kube.Allocate(resT4, t4[0], t4[1])
	if err == nil || !strings.Contains(err.Error(), t4[1]) {
		t.Fatalf("Allocate with vgpu_params failing: %v; want an error naming %s", err, t4[1])
	}
	n.k.ClearFault(f)
	for _, id := range t4[:2] {
		if a, ok := n.held(id); ok {
			t.Errorf("%s still held after the failed Allocate: %+v", id, a)
		}
	}

	vf := pci.MustParseAddress(l40s[0])
	if err := nvvf.ClearType(n.k, vf); err != nil {
		t.Fatal(err)
	}
	f = n.k.InjectFault(simkernel.Fault{Path: nvvf.Dir(vf) + "/current_vgpu_type"})
	if _, err := n.kube.Allocate(resL40S, l40s[0]); err == nil || !strings.Contains(err.Error(), l40s[0]) {
		t.Fatalf("Allocate with the type write failing: %v; want an error naming %s", err, l40s[0])
	}
	n.k.ClearFault(f)
	if a, ok := n.held(l40s[0]); ok {
		t.Errorf("%s held after the failed Allocate: %+v", l40s[0], a)
	}

	n.kube.WaitList(resT4, "the T4's vGPUs free and healthy again", kubelettest.AllHealthy(t4))
	n.allocateOne(resT4, t4[1], true)
	n.allocateOne(resL40S, l40s[0], false)
	if open := n.openIntents(); len(open) != 0 {
		t.Errorf("open intents after the failed Allocates: %+v", open)
	}
}
