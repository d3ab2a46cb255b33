//go:build e2e

package lab

import "testing"

// TestMdevctl runs, on the real kernel, the move of mbochs from Debian's
// mdevctl (in the lab's root) to vgpu: the import, the refusals while
// mdevctl starts an mdev there, and the apply that keeps it.
func TestMdevctl(t *testing.T) {
	guestTests(t, "^TestMdevctlMbochs$")
}
