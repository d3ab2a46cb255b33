package inventory_test

import (
	"context"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// What gim runs with: the parameters it was loaded with, else the file as
// it read it at load; nothing while it is not loaded.
func TestReadGIM(t *testing.T) {
	h := simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{{Model: "s7150", Address: pci.MustParseAddress("0000:3d:00.0")}},
		Files: map[string]string{"/etc/gim_config": "sched_option=2\nsched_interval=10\nvf_num=4\nbogus=3\nfb_clear=1\n"}}
	k, err := simkernel.New(h)
	if err != nil {
		t.Fatal(err)
	}
	check := func(want *inventory.GIMState) {
		t.Helper()
		got, err := inventory.ReadGIM(k)
		if err != nil {
			t.Fatal(err)
		}
		if (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Fatalf("ReadGIM = %+v, want %+v", got, want)
		}
	}
	check(&inventory.GIMState{VFNum: 4, SchedOption: 2, SchedIntervalMS: 10})
	modprobe := func(args ...string) {
		t.Helper()
		if out, err := k.RunTool(context.Background(), sysfs.ToolModprobe, args...); err != nil {
			t.Fatalf("modprobe %v: %v %s", args, err, out)
		}
	}
	modprobe("-r", "gim")
	check(nil)
	modprobe("gim", "sched_option=1")
	// The parameter wins; the others come from the file GIM read (and saved).
	check(&inventory.GIMState{VFNum: 4, SchedOption: 1, SchedIntervalMS: 10})
}
