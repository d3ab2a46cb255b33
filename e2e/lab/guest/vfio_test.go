//go:build labguest

package guest

import (
	"testing"

	"github.com/vgpu-project/vgpu/e2e/lab/vfio"
)

// mustOpenVFIO opens a device as a VFIO user (QEMU) would, or fails.
func mustOpenVFIO(t *testing.T, devDir, name string) *vfio.Session {
	t.Helper()
	s, err := vfio.Open(devDir, name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
