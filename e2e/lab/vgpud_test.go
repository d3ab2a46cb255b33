//go:build e2e

package lab

import "testing"

// TestVgpudReboot boots the lab twice on one share (the host's disk): vgpud
// carves the igb PF to its config at start; after the reboot, which takes
// every VF away, vgpud started again brings the host back to its config,
// and vgpuctl vgpus agrees.
func TestVgpudReboot(t *testing.T) {
	share := newShare(t)
	t.Run("before", func(t *testing.T) { guestTestsOn(t, share, "^TestVgpudBeforeReboot$") })
	if t.Failed() {
		return
	}
	t.Run("after", func(t *testing.T) { guestTestsOn(t, share, "^TestVgpudAfterReboot$") })
}

// TestVgpudCrash kills vgpud (its start's carve, a re-split on request)
// and vgpuctl (its own re-split) with SIGKILL while the carve has the igb
// PF's VF driver autoprobe off: the next vgpud, or vgpuctl's next carve,
// puts it back on, and it stays on after a SIGTERM and a second start.
func TestVgpudCrash(t *testing.T) {
	guestTests(t, "^TestVgpudCrash$")
}
