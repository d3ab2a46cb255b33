//go:build e2e

package lab

import "testing"

// TestLibvirtFullPath: libvirtd and QEMU in the guest, vgpud and vgpu-hook
// installed, a domain with a vGPU request (a VF of the igb PF) started:
// the hook readies the VF, QEMU opens it (firmware only), virsh destroy
// releases it and the ledger agrees.
func TestLibvirtFullPath(t *testing.T) {
	guestTests(t, "^TestLibvirtFullPath$")
}
