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
