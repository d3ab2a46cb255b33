//go:build e2e

package lab

import "testing"

// TestKernel runs, in one boot of the lab, the guest tests against the real
// kernel (e2e/lab/guest): vgpuctl's inventory of the sample mdev parents and
// of the SR-IOV PFs, carving VFs onto vfio-pci with the VFIO uAPI opening
// them, whole-PF passthrough and the driver it gets back, a two-function
// card passed through whole (by the lab's catalog profile and by the
// built-in passthrough, with no catalog entry), mbochs carved by
// profile as a framebuffer split, the kernel's refusals as vgpu reports
// them, and vgpud under its unit's capability bounding set.
func TestKernel(t *testing.T) {
	guestTests(t, "^(TestInventory|TestCarveSRIOV|TestPassthroughRestoresDriver|TestPassthroughMovesTheCard|TestPassthroughBuiltinMovesTheCard|TestCarveMbochs|TestKernelErrors|TestVgpudCapabilities)$")
}

// TestMttyReload runs, in its own boot, the guest check that unloading and
// loading mtty again gives its parent's mdev_supported_types a new inode
// number in the real kernel's sysfs, and that mdev.TypeCache reads the
// types' fixed attributes again because of it.
func TestMttyReload(t *testing.T) {
	guestTests(t, "^TestMttyReloadNewInode$")
}
