package carve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// ErrUseUnknown: whether a vGPU is in use cannot be told, for a process
// whose open files could not be read may hold it (no CAP_SYS_PTRACE). A
// change that would destroy such a vGPU is refused unless forced.
var ErrUseUnknown = errors.New("use unknown")

// VFIOUsage reports a vGPU as in use while a process (QEMU) holds its VFIO
// group or cdev open. It reads /proc and never opens the node itself: an
// open, however short, would make a VM starting at that moment fail. A
// vGPU that nobody visible holds while some process's open files cannot
// be read is of unknown use (ErrUseUnknown).
type VFIOUsage struct {
	FS sysfs.FS
	// snap, set by Snapshot, is one /proc scan shared by every call; nil
	// scans /proc at each call.
	snap *scan
}

// scan is a /proc scan taken at the first vGPU that needs one.
type scan struct {
	mu      sync.Mutex
	done    bool
	holders pci.Holders
	err     error
}

var _ UsageChecker = VFIOUsage{}

// Snapshot returns a VFIOUsage that scans /proc once for a pass over many
// vGPUs (a listing, or the vGPUs one carve would destroy), when the first
// of them with a VFIO node is asked about: where there is none, /proc is
// never read.
func (u VFIOUsage) Snapshot() VFIOUsage {
	return VFIOUsage{FS: u.FS, snap: &scan{}}
}

// Warning says why some vGPUs' use is unknown: the processes the scan
// could not read, and the capability it lacked; "" when the scan read
// every process, or none was needed.
func (u VFIOUsage) Warning() string {
	if u.snap == nil {
		return ""
	}
	u.snap.mu.Lock()
	defer u.snap.mu.Unlock()
	if !u.snap.done || u.snap.err != nil {
		return ""
	}
	return u.snap.holders.Warning()
}

func (u VFIOUsage) holders() (pci.Holders, error) {
	if u.snap == nil {
		return pci.ScanHolders(u.FS)
	}
	u.snap.mu.Lock()
	defer u.snap.mu.Unlock()
	if !u.snap.done {
		u.snap.holders, u.snap.err = pci.ScanHolders(u.FS)
		u.snap.done = true
	}
	return u.snap.holders, u.snap.err
}

// Holder implements UsageChecker for device addresses and mdev UUIDs.
func (u VFIOUsage) Holder(_ context.Context, vgpu string) (string, bool, error) {
	dir, group, ok, err := u.device(vgpu)
	if err != nil || !ok {
		return "", false, err
	}
	hs, err := u.holders()
	if err != nil {
		return "", false, fmt.Errorf("check use of %s: %w", vgpu, err)
	}
	of, err := hs.Of(u.FS, dir, group)
	if err != nil {
		return "", false, err
	}
	if len(of) == 0 {
		if w := hs.Warning(); w != "" {
			return "", false, fmt.Errorf("check use of %s: %w: %s", vgpu, ErrUseUnknown, w)
		}
		return "", false, nil
	}
	parts := make([]string, len(of))
	for i, h := range of {
		parts[i] = h.String()
	}
	return strings.Join(parts, ", "), true, nil
}

// device is the sysfs directory and IOMMU group of a vGPU; ok is false when
// it has no group (not on VFIO, or gone).
func (u VFIOUsage) device(vgpu string) (dir string, group int, ok bool, err error) {
	if _, err := uuid.Parse(vgpu); err == nil {
		in, ok, err := mdev.Get(u.FS, vgpu)
		if err != nil || !ok {
			return "", 0, false, err
		}
		return sysfs.MdevDevices + "/" + in.UUID, in.IOMMUGroup, in.IOMMUGroup >= 0, nil
	}
	a, err := pci.ParseAddress(vgpu)
	if err != nil {
		return "", 0, false, fmt.Errorf("check use of %q: not a PCI address or mdev UUID", vgpu)
	}
	group, ok, err = pci.IOMMUGroup(u.FS, a)
	return pci.DevicePath(a), group, ok, err
}
