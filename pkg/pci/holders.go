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

// Holders is one look at which processes hold VFIO nodes open.
type Holders struct {
	nodes map[string][]Holder // by node: /dev/vfio/12
	// Unreadable are the processes whose open files could not be read:
	// another user's, or a root one with capabilities this process lacks,
	// without CAP_SYS_PTRACE; a container's; one an LSM hides. Any of them
	// may hold a VFIO node, so a vGPU nobody visible holds is of unknown use
	// while there is one.
	Unreadable []Process
	// Why is the first failure to read one, with its errno.
	Why error
}

// Process names a process: pid and /proc/<pid>/comm.
type Process struct {
	PID  int
	Comm string
}

func (p Process) String() string { return fmt.Sprintf("%s (pid %d)", p.Comm, p.PID) }

// Warning says, in one line, that some processes' open files could not be
// read and why: "" when every process was read.
func (h Holders) Warning() string {
	if len(h.Unreadable) == 0 {
		return ""
	}
	const shown = 3
	var names []string
	for i, p := range h.Unreadable {
		if i == shown {
			names = append(names, fmt.Sprintf("and %d more", len(h.Unreadable)-shown))
			break
		}
		names = append(names, p.String())
	}
	why := h.Why.Error()
	if errors.Is(h.Why, fs.ErrPermission) {
		why += " (reading another user's or a more privileged process's open files needs CAP_SYS_PTRACE)"
	}
	n := "1 process"
	if len(h.Unreadable) > 1 {
		n = fmt.Sprintf("%d processes", len(h.Unreadable))
	}
	return fmt.Sprintf("the open files of %s could not be read: %s; %s; whether they hold a vGPU is unknown",
		n, strings.Join(names, ", "), why)
}

// ScanHolders reads which processes hold VFIO nodes open from /proc/<pid>/fd,
// without opening any node: an open of /dev/vfio/<group>, even a short one,
// makes a QEMU starting at that moment fail with EBUSY, for a group admits one
// opener. Processes that exit during the scan are skipped; one whose open
// files cannot be read is named in Unreadable, never taken to hold nothing.
// Only a /proc that cannot be listed is an error.
func ScanHolders(f sysfs.FS) (Holders, error) {
	procs, err := f.ReadDir(sysfs.Proc)
	if err != nil {
		return Holders{}, fmt.Errorf("list processes in %s to find VFIO users: %w", sysfs.Proc, err)
	}
	out := Holders{nodes: map[string][]Holder{}}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if err := scanProcess(f, pid, &out); err != nil && !gone(err) {
			out.Unreadable = append(out.Unreadable, Process{PID: pid, Comm: comm(f, pid)})
			if out.Why == nil {
				out.Why = err
			}
		}
	}
	for _, hs := range out.nodes {
		sort.Slice(hs, func(i, j int) bool { return hs[i].PID < hs[j].PID })
	}
	return out, nil
}

// scanProcess adds what pid holds to out; an error says its open files
// could not be read (or that it is gone).
func scanProcess(f sysfs.FS, pid int, out *Holders) error {
	dir := sysfs.Proc + "/" + strconv.Itoa(pid) + "/fd"
	fds, err := f.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, sysfs.Errno(err))
	}
	name := ""
	for _, fd := range fds {
		t, err := f.Readlink(dir + "/" + fd.Name())
		if err != nil {
			if gone(err) {
				continue // closed meanwhile
			}
			// ptrace_may_access refuses them all alike: the rest of this
			// process's fds read no better.
			return fmt.Errorf("read %s/%s: %w", dir, fd.Name(), sysfs.Errno(err))
		}
		if !strings.HasPrefix(t, sysfs.VFIODev+"/") {
			continue
		}
		if name == "" {
			name = comm(f, pid)
		}
		if hs := out.nodes[t]; len(hs) == 0 || hs[len(hs)-1].PID != pid {
			out.nodes[t] = append(hs, Holder{PID: pid, Comm: name, Node: t})
		}
	}
	return nil
}

// comm is /proc/<pid>/comm, or "process" when it cannot be read.
func comm(f sysfs.FS, pid int) string {
	b, _ := f.ReadFile(sysfs.Proc + "/" + strconv.Itoa(pid) + "/comm")
	if c := strings.TrimSpace(string(b)); c != "" {
		return c
	}
	return "process"
}

// gone: the process exited between listing and reading.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// OfNode lists the holders of one VFIO node (/dev/vfio/12).
func (h Holders) OfNode(node string) []Holder { return h.nodes[node] }

// OfGroup is OfNode of the IOMMU group's node (GroupDevicePath), without
// allocating: a listing asks it of every vGPU.
func (h Holders) OfGroup(group int) []Holder {
	var buf [64]byte
	node := strconv.AppendInt(append(buf[:0], sysfs.VFIODev+"/"...), int64(group), 10)
	return h.nodes[string(node)]
}

// AnyCdev reports whether some process holds an iommufd cdev
// (/dev/vfio/devices/vfioN): only then must a listing read each device's
// cdevs to know its holders.
func (h Holders) AnyCdev() bool {
	for node := range h.nodes {
		if strings.HasPrefix(node, sysfs.VFIODevices+"/") {
			return true
		}
	}
	return false
}

// Of lists the holders of a VFIO device: of its group's node, and of its
// iommufd cdev when it has one (devDir/vfio-dev/vfioN, kernel 6.2 and later),
// which a user can open without opening the group.
func (h Holders) Of(f sysfs.FS, devDir string, group int) ([]Holder, error) {
	out := append([]Holder(nil), h.OfNode(GroupDevicePath(group))...)
	cdevs, err := sysfs.Names(f, devDir+"/vfio-dev")
	if err != nil {
		return nil, err
	}
	for _, c := range cdevs {
		out = append(out, h.OfNode(sysfs.VFIODevices+"/"+c)...)
	}
	return out, nil
}
