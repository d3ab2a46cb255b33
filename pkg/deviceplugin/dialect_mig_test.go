//go:build cgo

package deviceplugin_test

import (
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/nvvf"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// TestMIGBacked: a MIG-backed profile (an A100's 1g.5gb instance under
// each VF's vGPU type, vGPU 17+) is served by VF address; the allocated
// VF stays on nvidia with its type set, on its GPU instance.
func TestMIGBacked(t *testing.T) {
	const gpu = "0000:ca:00.0"
	nv, err := simnvml.New(simnvml.GPU{Model: simnvml.ModelA100PCIe40GB, BusID: gpu})
	if err != nil {
		t.Fatal(err)
	}
	n := newNodeFor(t, simkernel.Host{Version: simkernel.HostVersion, GPUs: []simkernel.HostGPU{
		{Model: simkernel.ModelA100VF, Address: pci.MustParseAddress(gpu)}}}, "  - address: \""+gpu+"\"\n    profile: a100-1-5c\n")
	n.k.SetMIG(nv)
	n.mig = nvmlstate.NewWith(nv, "simnvml")
	n.start()
	vs := ids(n.listed("a100-1-5c"))
	if len(vs) != 7 || len(nv.Instances(gpu)) != 7 {
		t.Fatalf("a100-1-5c vGPUs %v on %d GPU instances, want 7 on 7", vs, len(nv.Instances(gpu)))
	}
	n.allocateOne(domain+"/a100-1-5c", vs[4], false)
	vf := pci.MustParseAddress(vs[4])
	if _, cur, _, err := nvvf.Read(n.k, vf); err != nil || cur != 474 {
		t.Errorf("the allocated VF's vGPU type is %d (%v), want 474 (NVIDIA A100-1-5C)", cur, err)
	}
	if drv, err := pci.CurrentDriver(n.k, vf); err != nil || drv != "nvidia" {
		t.Errorf("the allocated VF is on %q (%v), want nvidia", drv, err)
	}
}
