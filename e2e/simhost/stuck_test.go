package simhost

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/e2e/internal/simproc"
	"github.com/vgpu-project/vgpu/internal/sim/kernel/fusefs"
)

// TestStuckVgpuctlExplainsItself holds a carve's first write so that
// vgpuctl outlives its limit: the account says where vgpuctl waits in the
// kernel (on its FUSE request) and where vgpusim holds that request, and
// both processes are gone after it.
func TestStuckVgpuctlExplainsItself(t *testing.T) {
	s := startSim(t, "mixed.yaml")
	hold := fusefs.FaultRequest{Kind: fusefs.KindHold, Path: "/sys/bus/pci/devices/" + mi25 + "/sriov_numvfs"}
	if _, err := s.Client.Inject(context.Background(), hold); err != nil {
		t.Fatal(err)
	}
	c := s.vgpuctlCmd("carve", mi25, "--profile", "mi25-4g")
	c.start(t)
	s.WaitHeld(1)
	stuck, err := simproc.WaitCmd(c.cmd, time.Second, c.sim)
	for _, want := range []string{
		"vgpuctl did not exit within 1s",
		"request_wait_answer",                  // vgpuctl's write, in the kernel
		"fuse_dev_do_read",                     // vgpusim's idle readers
		"fusefs.(*Holds).wait",                 // the goroutine holding the write
		"vgpusim's FUSE queue is empty",        // it has read the write
		"vgpuctl still there 5s after SIGQUIT", // held: read by vgpusim
	} {
		if !strings.Contains(stuck, want) {
			t.Errorf("the account of a held vgpuctl lacks %q:\n%s", want, stuck)
		}
	}
	if c.cmd.ProcessState == nil || err == nil {
		t.Errorf("vgpuctl not ended (%v, %v)", c.cmd.ProcessState, err)
	}
	if s.Running() {
		t.Error("vgpusim still running after the account")
	}
}
