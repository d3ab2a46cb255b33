package simhost

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-project/vgpu/internal/sim/kernel/fusefs"
)

// TestFaultMidCarve fails one write in the middle of a carve through the
// control socket: vgpuctl exits 1, every step before it is undone and the
// host looks exactly as before. Without the fault the same carve works.
func TestFaultMidCarve(t *testing.T) {
	cases := []struct {
		name    string
		gpu     string
		profile string
		fault   fusefs.FaultRequest
	}{
		{"first step", mi25, "mi25-4g", fusefs.FaultRequest{
			Path: "/sys/bus/pci/devices/" + mi25 + "/sriov_numvfs", Errno: "EBUSY"}},
		{"third VF bind", mi25, "mi25-4g", fusefs.FaultRequest{
			Path: "/sys/bus/pci/drivers_probe", Nth: 3, Errno: "EIO"}},
		{"VF not yet there when armed", mi25, "mi25-4g", fusefs.FaultRequest{
			Path: "/sys/bus/pci/devices/0000:03:00.4/driver_override", Errno: "ENOMEM"}},
		{"fifth mdev", t4, "t4-1q", fusefs.FaultRequest{
			Path: "/sys/class/mdev_bus/" + t4 + "/mdev_supported_types/nvidia-230/create", Nth: 5, Errno: "ENOSPC"}},
		{"third NVIDIA type", l40s, "l40s-12q", fusefs.FaultRequest{
			Path: "/sys/bus/pci/devices/" + l40s + "/virtfn2/nvidia/current_vgpu_type", Errno: "EIO"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := startSim(t, "mixed.yaml")
			ctx := context.Background()
			before := s.snapshot()
			if _, err := s.Client.Inject(ctx, c.fault); err != nil {
				t.Fatalf("inject: %v", err)
			}
			r := s.vgpuctl("carve", c.gpu, "--profile", c.profile)
			if r.code != 1 {
				t.Fatalf("carve with a fault on %s: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", c.fault.Path, r.code, r.stdout, r.stderr)
			}
			// The fault fired: vgpuctl reports its errno, and where the
			// path survives the undo, vgpusim counted the writes. (Writes
			// over FUSE arrive under the real path, so a VF's bus path
			// stops answering once the VF is gone.)
			errno, _ := fusefs.ParseErrno(c.fault.Errno)
			if !strings.Contains(r.stderr, errno.Error()) {
				t.Errorf("vgpuctl's message does not carry the kernel's error %q:\n%s", errno.Error(), r.stderr)
			}
			if _, err := os.Stat(filepath.Join(s.Mnt, c.fault.Path)); err == nil {
				if n, err := s.Client.Writes(ctx, c.fault.Path); err != nil || n < max(c.fault.Nth, 1) {
					t.Fatalf("the faulted path saw %d writes (%v): the fault never fired", n, err)
				}
			}
			diffSnapshots(t, "a carve failing at "+c.name, before, s.snapshot())
			if _, err := s.Client.ClearFaults(ctx); err != nil {
				t.Fatal(err)
			}
			s.vgpuctl("carve", c.gpu, "--profile", c.profile).ok(t)
		})
	}
}

// TestHoldThenKillWriter stops vgpuctl in the middle of a carve with a
// hold, kills it with SIGKILL, fails the held write, and shows that the
// next carve repairs the half-carved GPU to exactly the profile: the
// pattern agent tests use to crash a daemon mid-step.
func TestHoldThenKillWriter(t *testing.T) {
	ref := referenceSnapshots(t, mi25, "mi25-4g")["mi25-4g"]
	s := startSim(t, "mixed.yaml")
	ctx := context.Background()
	if _, err := s.Client.Inject(ctx, fusefs.FaultRequest{Kind: fusefs.KindHold, Path: "/sys/bus/pci/drivers_probe", Nth: 2}); err != nil {
		t.Fatal(err)
	}
	c := s.vgpuctlCmd("carve", mi25, "--profile", "mi25-4g")
	c.start(t)
	s.WaitHeld(1)
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The killed writer stays in the kernel until its write is answered.
	if n, err := s.Client.Release(ctx, fusefs.ReleaseRequest{Errno: "EIO"}); err != nil || n != 1 {
		t.Fatalf("release: %d, %v", n, err)
	}
	if r := c.wait(t); r.code != -1 {
		t.Fatalf("killed vgpuctl: exit %d, want killed", r.code)
	}
	if n := len(s.vgpusOf(t, mi25)); n != 1 {
		t.Fatalf("after the kill %d VFs are on vfio-pci, want 1 (the step before the held one)", n)
	}
	s.vgpuctl("carve", mi25, "--profile", "mi25-4g").ok(t)
	diffSnapshots(t, "a carve repaired after a crash (against a clean carve)", ref, s.snapshot())
}
