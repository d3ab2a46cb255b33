package convert

import (
	"reflect"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// TestResultBack: vgpuctl prints a carve vgpud answered as the carve it
// was, every field of every op kept.
func TestResultBack(t *testing.T) {
	vf, start, no, empty := 3, 4, false, ""
	gpu := pci.MustParseAddress("0000:41:00.0")
	for _, r := range []carve.Result{
		{},
		{Plan: carve.Plan{Parent: "mbochs", Ops: []carve.Op{}}},
		{Plan: carve.Plan{GPU: gpu, Profile: "l40s-12q", Ops: []carve.Op{
			{Kind: carve.OpDriver, Device: gpu, VF: &vf, To: "vfio-pci", Count: 2, Override: &empty, Parent: "0000:41:00.4",
				Type: "nvidia-1155", UUID: "8f0b5a4e-0000-4000-8000-000000000001", Start: &start,
				Instance: &nvstate.Instance{ID: 1, ProfileID: 19, Start: 4, Size: 1}, Keep: []int{1, 2},
				Sched:  &nvstate.Sched{Policy: 2, ARR: 1, TimesliceNS: 2000000, AvgFactor: 33, FrequencyHz: 480},
				Params: []string{"sched_option=1"}, Destroys: "0000:41:00.4", Autoprobe: &no,
				Attr: "exec_quantum_ms", Value: "20", Bulk: true},
			{Kind: carve.OpMdevRemove, UUID: "8f0b5a4e-0000-4000-8000-000000000001"},
		}, Blocked: []vgpu.Blocker{{VGPU: "0000:41:00.4", Holder: "qemu (pid 1)", Unknown: true}}}, Applied: 1},
	} {
		got, err := Result(CarveResult(r, false))
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("Result(CarveResult(%+v)) = %+v, %v", r, got, err)
		}
	}
	bad := api.CarveResult{Plan: api.Plan{GPU: "0000:41:00.0", Ops: []api.Op{{Kind: "driver", Device: "41:00"}}}}
	if _, err := Result(bad); err == nil || !strings.Contains(err.Error(), "plan.ops[0].device") {
		t.Errorf("Result of a bad device address: %v; want an error naming plan.ops[0].device", err)
	}
}
