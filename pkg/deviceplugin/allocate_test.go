package deviceplugin_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/deviceplugin/kubelettest"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// groupNodes are the device nodes a vGPU's VFIO group gives QEMU.
func groupNodes(vs ...api.VGPU) []string {
	out := []string{"/dev/vfio/vfio"}
	for _, v := range vs {
		out = append(out, fmt.Sprintf("/dev/vfio/%d", v.IOMMUGroup))
	}
	return out
}

func specPaths(cr *pluginapi.ContainerAllocateResponse) []string {
	var out []string
	for _, d := range cr.Devices {
		out = append(out, d.HostPath)
		if d.ContainerPath != d.HostPath || d.Permissions != "mrw" {
			panic(fmt.Sprintf("device spec %+v", d))
		}
	}
	return out
}

// TestAllocate: Allocate claims in the ledger (a pod's container holds
// them, attached) and answers what KubeVirt reads: the mdev UUIDs in
// MDEV_PCI_RESOURCE_<NAME>, VF addresses in PCI_RESOURCE_<NAME>, and the
// VFIO device nodes. The pod's vGPUs stay listed under its resource.
func TestAllocate(t *testing.T) {
	n := startMixed(t)
	for _, tc := range []struct {
		res, profile, env string
	}{
		{resT4, "t4-4q", "MDEV_PCI_RESOURCE_VGPU_EXAMPLE_ORG_T4-4Q"},
		{resMI25, "mi25-4g", "PCI_RESOURCE_VGPU_EXAMPLE_ORG_MI25-4G"},
		{resL40S, "l40s-12q", "PCI_RESOURCE_VGPU_EXAMPLE_ORG_L40S-12Q"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			vs := n.listed(tc.profile)
			cr, err := n.kube.Allocate(tc.res, vs[2].ID, vs[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := cr.Envs, map[string]string{tc.env: vs[2].ID + "," + vs[0].ID}; !mapsEqual(got, want) {
				t.Errorf("envs = %v, want %v", got, want)
			}
			if got, want := slices.Sorted(slices.Values(specPaths(cr))), slices.Sorted(slices.Values(groupNodes(vs[2], vs[0]))); !slices.Equal(got, want) {
				t.Errorf("device nodes = %v, want %v", got, want)
			}
			held := 0
			for _, a := range n.allocations() {
				if a.VGPU == vs[0].ID || a.VGPU == vs[2].ID {
					held++
					if a.State != "attached" || a.Pod.Resource != tc.res {
						t.Errorf("ledger: %+v", a)
					}
				}
			}
			if held != 2 {
				t.Errorf("ledger holds %d of the 2 allocated", held)
			}
			// Still listed, healthy, once its pod runs: the kubelet counts
			// them as its pod's.
			n.kube.SetPod("default", "vm-"+tc.profile, "compute", tc.res, vs[2].ID, vs[0].ID)
			n.kube.WaitList(tc.res, "unchanged", kubelettest.AllHealthy(ids(vs)))
		})
	}
}

// TestAllocateRefuses: an unknown id, one of another profile, one already
// claimed, one a libvirt domain holds: a gRPC error naming it, and
// nothing claimed, not even the good ids of the same request.
func TestAllocateRefuses(t *testing.T) {
	n := startMixed(t)
	vs := n.listed("t4-4q")
	if _, err := n.kube.Allocate(resT4, vs[0].ID); err != nil {
		t.Fatal(err)
	}
	// A domain reserves one by the libvirt door (vgpuctl attach).
	h, err := n.c.Reserve(bg, "4dea22b3-1d52-d8f3-2516-782e98ab3fa0", api.ReserveRequest{Name: "web01", Profile: "t4-4q", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	domains := h.Allocations[0].VGPU
	n.kube.WaitList(resT4, "the domain's vGPU withdrawn", func(l map[string]string) bool { _, ok := l[domains]; return !ok && len(l) == 3 })
	free := ""
	for _, v := range vs {
		if v.ID != vs[0].ID && v.ID != domains {
			free = v.ID
		}
	}
	before := len(n.allocations())
	for _, tc := range []struct {
		name string
		ids  []string
		code codes.Code
		msg  string
	}{
		{"unknown", []string{free, "11111111-2222-3333-4444-555555555555"}, codes.InvalidArgument, "11111111-2222-3333-4444-555555555555"},
		{"another profile", []string{free, n.vgpusOf("mi25-4g")[0].ID}, codes.InvalidArgument, "is a mi25-4g vGPU, not t4-4q"},
		{"claimed by a pod", []string{free, vs[0].ID}, codes.FailedPrecondition, "attached to a container the kubelet allocated " + resT4},
		{"held by a domain", []string{free, domains}, codes.FailedPrecondition, "reserved for domain web01"},
		{"not an id", []string{"../../etc"}, codes.InvalidArgument, "neither a PCI address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.kube.Allocate(resT4, tc.ids...)
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v; want %s with %q", err, tc.code, tc.msg)
			}
			if got := len(n.allocations()); got != before {
				t.Errorf("%d allocations after a refused Allocate, want %d", got, before)
			}
		})
	}
	if c := n.logLines("kubelet: allocation refused"); c != 5 {
		t.Errorf("%d refusals logged, want one line each (5)", c)
	}
}

// TestAllocateMultiContainer: one container's refusal frees what the
// containers before it got: the kubelet fails the whole pod.
func TestAllocateMultiContainer(t *testing.T) {
	n := startMixed(t)
	vs := n.listed("mi25-4g")
	_, err := n.kube.Client(resMI25).Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{vs[0].ID}}, {DevicesIds: []string{"0000:99:00.1"}}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("err = %v", err)
	}
	if as := n.allocations(); len(as) != 0 {
		t.Errorf("left claimed: %+v", as)
	}
}

// TestGetPreferredAllocation: the allocator's rules choose: NUMA-local,
// least-loaded GPUs, must-include first, among what the kubelet offers.
func TestGetPreferredAllocation(t *testing.T) {
	// Two MI25s, one per NUMA node.
	n := newNodeFor(t, simkernel.Host{Version: "v1", NUMANodes: 2, GPUs: []simkernel.HostGPU{
		{Model: simkernel.ModelMI25, Address: pci.MustParseAddress("0000:03:00.0"), NUMANode: 0},
		{Model: simkernel.ModelMI25, Address: pci.MustParseAddress("0000:83:00.0"), NUMANode: 1}}}, "  - all: true\n    profile: mi25-4g\n")
	n.start()
	vs := n.listed("mi25-4g")
	byNode := map[int][]string{}
	for _, v := range vs {
		byNode[v.NUMANode] = append(byNode[v.NUMANode], v.ID)
	}
	if len(byNode[0]) != 4 || len(byNode[1]) != 4 {
		t.Fatalf("host: %v", byNode)
	}
	// Node 0's GPU gets a pod: node 1's is the least loaded.
	if _, err := n.kube.Allocate(resMI25, byNode[0][0]); err != nil {
		t.Fatal(err)
	}
	avail := slices.DeleteFunc(ids(vs), func(id string) bool { return id == byNode[0][0] })
	prefer := func(must []string, size int) []string {
		t.Helper()
		resp, err := n.kube.Client(resMI25).GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
			ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, MustIncludeDeviceIDs: must, AllocationSize: int32(size)}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.ContainerResponses[0].DeviceIDs
	}
	if got := prefer(nil, 2); !slices.Equal(got, byNode[1][:2]) {
		t.Errorf("prefer 2 = %v, want node 1's %v", got, byNode[1][:2])
	}
	if got := prefer([]string{byNode[0][1]}, 3); !slices.Equal(got, []string{byNode[0][1], byNode[0][2], byNode[0][3]}) {
		t.Errorf("prefer 3 with one of node 0 = %v, want node 0's", got)
	}
	if as := n.allocations(); len(as) != 1 {
		t.Errorf("GetPreferredAllocation held something: %+v", as)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
