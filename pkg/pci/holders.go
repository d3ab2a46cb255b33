package pci

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Holder is a process with a VFIO node open: QEMU holding a VM's device.
type Holder struct {
	PID  int
	Comm string // the process name, as /proc/<pid>/comm says ("qemu-system-x86")
	Node string // the node it holds: /dev/vfio/12 or /dev/vfio/devices/vfio0
}

func (h Holder) String() string {
	return fmt.Sprintf("%s (pid %d) holds %s", h.Comm, h.PID, h.Node)
}

// Holders maps a VFIO node to the processes holding it open.
type Holders map[string][]Holder

// ScanHolders reads which processes hold VFIO nodes open from /proc/<pid>/fd,
// without opening any node: an open of /dev/vfio/<group>, even a short one,
// makes a QEMU starting at that moment fail with EBUSY, for a group admits one
// opener. Processes that exit during the scan are skipped; a /proc/<pid>/fd
// that cannot be read for another reason (not root) is an error, for a
// holder could hide there.
func ScanHolders(f sysfs.FS) (Holders, error) {
	procs, err := f.ReadDir(sysfs.Proc)
	if err != nil {
		return nil, fmt.Errorf("list processes in %s to find VFIO users: %w", sysfs.Proc, err)
	}
	out := Holders{}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid <= 0 {
			continue
		}
		dir := sysfs.Proc + "/" + p.Name() + "/fd"
		fds, err := f.ReadDir(dir)
		if err != nil {
			if gone(err) {
				continue
			}
			return nil, fmt.Errorf("read %s to find VFIO users: %w", dir, sysfs.Errno(err))
		}
		var comm string
		for _, fd := range fds {
			t, err := f.Readlink(dir + "/" + fd.Name())
			if err != nil {
				if gone(err) {
					continue // closed meanwhile
				}
				// Another user's fds need CAP_SYS_PTRACE to read: without
				// it a VM's hold would look like none.
				return nil, fmt.Errorf("read %s/%s to find VFIO users: %w (reading another user's open files needs CAP_SYS_PTRACE)",
					dir, fd.Name(), sysfs.Errno(err))
			}
			if !strings.HasPrefix(t, sysfs.VFIODev+"/") {
				continue
			}
			if comm == "" {
				b, err := f.ReadFile(sysfs.Proc + "/" + p.Name() + "/comm")
				if err != nil && !gone(err) {
					return nil, fmt.Errorf("read %s/%s/comm: %w", sysfs.Proc, p.Name(), sysfs.Errno(err))
				}
				if comm = strings.TrimSpace(string(b)); comm == "" {
					comm = "process"
				}
			}
			if hs := out[t]; len(hs) == 0 || hs[len(hs)-1].PID != pid {
				out[t] = append(hs, Holder{PID: pid, Comm: comm, Node: t})
			}
		}
	}
	for _, hs := range out {
		sort.Slice(hs, func(i, j int) bool { return hs[i].PID < hs[j].PID })
	}
	return out, nil
}

// gone: the process exited between listing and reading.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// Of lists the holders of a VFIO device: of its group's node, and of its
// iommufd cdev when it has one (devDir/vfio-dev/vfioN, kernel 6.2 and later),
// which a user can open without opening the group.
func (h Holders) Of(f sysfs.FS, devDir string, group int) ([]Holder, error) {
	out := append([]Holder(nil), h[GroupDevicePath(group)]...)
	cdevs, err := sysfs.Names(f, devDir+"/vfio-dev")
	if err != nil {
		return nil, err
	}
	for _, c := range cdevs {
		out = append(out, h[sysfs.VFIODevices+"/"+c]...)
	}
	return out, nil
}
