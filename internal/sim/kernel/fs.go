package simkernel

import (
	"io"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"syscall"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

func pathErr(op, name string, errno syscall.Errno) error {
	return &fs.PathError{Op: op, Path: name, Err: errno}
}

// ReadFile implements sysfs.FS. Reading a write-only attribute is EACCES,
// as kernfs refuses the open.
func (k *Kernel) ReadFile(name string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, errno := k.resolve(name, true)
	if errno != 0 {
		return nil, pathErr("open", name, errno)
	}
	switch n.kind {
	case kindDir:
		return nil, pathErr("read", name, syscall.EISDIR)
	case kindDev:
		return nil, pathErr("read", name, syscall.EINVAL)
	}
	if n.show == nil || n.perm&0o444 == 0 {
		return nil, pathErr("open", name, syscall.EACCES)
	}
	return []byte(n.show()), nil
}

// WriteFile implements sysfs.FS: one write(2) to an existing attribute.
// The write counts (Writes) and meets injected faults under the canonical,
// symlink-free path; an empty write reaches no store method, as in sysfs.
// The call may block (sriov_numvfs=0, mdev remove, unbind) until a VFIO
// user closes its group.
func (k *Kernel) WriteFile(name string, data []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, errno := k.resolve(name, true)
	if errno != 0 {
		return pathErr("open", name, errno)
	}
	switch n.kind {
	case kindDir:
		return pathErr("open", name, syscall.EISDIR)
	case kindDev:
		return pathErr("write", name, syscall.EINVAL)
	}
	if n.store == nil || n.perm&0o222 == 0 {
		return pathErr("open", name, syscall.EACCES)
	}
	canon := n.path()
	k.writes[canon]++
	if alias := path.Clean("/" + name); alias != canon {
		// Remembered under the caller's path too, so that Writes still
		// answers for /sys/bus/pci/devices/<VF>/... once the VF is gone.
		k.aliasWrites[alias]++
	}
	if errno := k.faultFor(canon); errno != 0 {
		return pathErr("write", name, errno)
	}
	if len(data) == 0 {
		return nil
	}
	if len(data) > 4096 {
		return pathErr("write", name, syscall.E2BIG)
	}
	if errno := n.store(string(data)); errno != 0 {
		return pathErr("write", name, errno)
	}
	return nil
}

// ReadDir implements sysfs.FS: entries sorted by name; symlinks in name
// are followed, entries are not.
func (k *Kernel) ReadDir(name string) ([]fs.DirEntry, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, errno := k.resolve(name, true)
	if errno != 0 {
		return nil, pathErr("open", name, errno)
	}
	if n.kind != kindDir {
		return nil, pathErr("readdirent", name, syscall.ENOTDIR)
	}
	return n.entries(), nil
}

// Readlink implements sysfs.FS: the relative target as stored. An fd link
// of a process SetFDsUnreadable hides is EACCES.
func (k *Kernel) Readlink(name string) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, errno := k.resolve(name, false)
	if errno != 0 {
		return "", pathErr("readlink", name, errno)
	}
	if n.kind != kindLink {
		return "", pathErr("readlink", name, syscall.EINVAL)
	}
	if k.privateFD(n) {
		return "", pathErr("readlink", name, syscall.EACCES)
	}
	return n.target, nil
}

// SetFDsUnreadable makes the open files of process pid unreadable to the
// reader, or readable again: readlink of /proc/<pid>/fd/<n> is then EACCES,
// as the real /proc answers a reader without CAP_SYS_PTRACE about another
// user's process, or a root one with capabilities the reader lacks
// (proc_fd_access_allowed's ptrace_may_access); listing the directory
// still works. It holds for pid's open files now and later.
func (k *Kernel) SetFDsUnreadable(pid int, unreadable bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if unreadable {
		k.private[pid] = true
	} else {
		delete(k.private, pid)
	}
}

// privateFD: n is /proc/<pid>/fd/<n> of a pid SetFDsUnreadable hides.
// Caller holds k.mu.
func (k *Kernel) privateFD(n *node) bool {
	fds := n.parent
	if fds == nil || fds.name != "fd" || fds.parent == nil || fds.parent.parent == nil || fds.parent.parent.path() != sysfs.Proc {
		return false
	}
	pid, err := strconv.Atoi(fds.parent.name)
	return err == nil && k.private[pid]
}

// Lstat implements sysfs.FS.
func (k *Kernel) Lstat(name string) (fs.FileInfo, error) {
	return k.stat("lstat", name, false)
}

// Stat implements sysfs.FS.
func (k *Kernel) Stat(name string) (fs.FileInfo, error) {
	return k.stat("stat", name, true)
}

func (k *Kernel) stat(op, name string, follow bool) (fs.FileInfo, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, errno := k.resolve(name, follow)
	if errno != 0 {
		return nil, pathErr(op, name, errno)
	}
	base := path.Base(path.Clean("/" + name))
	return n.info(base), nil
}

// DeviceHandle is an open device node (or attribute) from OpenDevice.
type DeviceHandle struct {
	k      *Kernel
	n      *node
	name   string
	closed bool
	proc   *process // nil for attributes
	fd     int
}

// Close releases the handle; a VFIO group becomes free for the next opener
// and blocked writers waiting for it proceed.
func (h *DeviceHandle) Close() error {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	if h.closed {
		return &fs.PathError{Op: "close", Path: h.name, Err: fs.ErrClosed}
	}
	h.closed = true
	h.k.dropFD(h.proc, h.fd)
	h.n.opens--
	if h.n.opens == 0 {
		h.k.vfioUserEnable(h.n, false)
	}
	h.k.cond.Broadcast()
	return nil
}

// vfioUserEnable is vfio-pci enabling its device when a user opens it and
// disabling it when the user lets go (the PCI enable attribute shows it).
func (k *Kernel) vfioUserEnable(n *node, on bool) {
	if n.kind != kindDev || n.group == nil {
		return
	}
	for _, d := range n.group.pcis {
		if !d.gone && d.driver != nil && d.driver.def.vfio {
			d.enabled = on
		}
	}
}

// Ino is the inode number of the opened node (for a FUSE layer).
func (h *DeviceHandle) Ino() uint64 { return h.n.ino }

// OpenDevice implements sysfs.FS. A /dev/vfio/<group> node admits one
// opener (EBUSY for the second, as VFIO groups do); /dev/vfio/vfio any
// number. Opening an attribute read-write needs both permissions.
func (k *Kernel) OpenDevice(name string) (io.Closer, error) {
	return k.Open(name)
}

// Open is OpenDevice with the concrete handle type, by a new simulated QEMU
// process: /proc shows it holding the node until Close.
func (k *Kernel) Open(name string) (*DeviceHandle, error) {
	return k.OpenAs(Opener{Comm: "qemu-system-x86"}, name)
}

// Opener is the process a device is opened by. PID 0 makes a new simulated
// process; a FUSE layer passes its caller's pid and name.
type Opener struct {
	PID  int
	Comm string
}

// OpenAs opens name on behalf of o. A device node opened shows as
// /proc/<pid>/fd/<n> -> the node's path, with /proc/<pid>/comm, as the real
// /proc does; the process's directory goes with its last open device.
func (k *Kernel) OpenAs(o Opener, name string) (*DeviceHandle, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, errno := k.resolve(name, true)
	if errno != 0 {
		return nil, pathErr("open", name, errno)
	}
	switch n.kind {
	case kindDir:
		return nil, pathErr("open", name, syscall.EISDIR)
	case kindFile:
		if n.show == nil || n.store == nil {
			return nil, pathErr("open", name, syscall.EACCES)
		}
	case kindDev:
		if n.group != nil && n.opens > 0 {
			return nil, pathErr("open", name, syscall.EBUSY)
		}
		if n.group.untypedNVVF() {
			return nil, pathErr("open", name, syscall.ENODEV)
		}
	}
	n.opens++
	k.vfioUserEnable(n, true)
	h := &DeviceHandle{k: k, n: n, name: name}
	if n.kind == kindDev {
		h.proc, h.fd = k.addFD(o, n.path())
	}
	return h, nil
}

// OpenCount reports the open handles on a device node; 0 when it does not exist.
func (k *Kernel) OpenCount(devPath string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, errno := k.resolve(devPath, true)
	if errno != 0 {
		return 0
	}
	return n.opens
}

// Fault makes writes to Path fail with Errno: only the Nth matching write
// after injection (1-based; 0 means 1), or, with Always, the Nth and every
// later one. The path is compared after resolving symlinks, so a fault on
// /sys/bus/pci/devices/X/sriov_numvfs catches writes through
// /sys/devices/.../X/sriov_numvfs and the reverse. The faulted write has no
// effect. Errno 0 means EIO.
type Fault struct {
	Path   string
	Nth    int
	Errno  syscall.Errno
	Always bool
}

type faultState struct {
	Fault
	seen int
}

// InjectFault arms f and returns its id for ClearFault.
func (k *Kernel) InjectFault(f Fault) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if f.Nth < 1 {
		f.Nth = 1
	}
	if f.Errno == 0 {
		f.Errno = syscall.EIO
	}
	k.nextFault++
	k.faults[k.nextFault] = &faultState{Fault: f}
	return k.nextFault
}

// ClearFault disarms one fault.
func (k *Kernel) ClearFault(id int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.faults, id)
}

// ClearFaults disarms every fault.
func (k *Kernel) ClearFaults() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.faults = map[int]*faultState{}
}

// faultFor counts a write to canon against every matching fault and
// returns the errno of the first (by id) that fires.
func (k *Kernel) faultFor(canon string) syscall.Errno {
	ids := make([]int, 0, len(k.faults))
	for id := range k.faults {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var fire syscall.Errno
	for _, id := range ids {
		f := k.faults[id]
		if k.canonical(f.Path) != canon {
			continue
		}
		f.seen++
		if fire == 0 && (f.seen == f.Nth || f.Always && f.seen > f.Nth) {
			fire = f.Errno
		}
	}
	return fire
}

// Writes reports how many writes reached the attribute at p (through any
// path that resolves to it), failed and faulted ones included; writes
// refused at open (EACCES, ENOENT) are not counted. For a path that no
// longer resolves, the writes made through that very path (or to that
// canonical path) are reported.
func (k *Kernel) Writes(p string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.canonical(p)
	if _, errno := k.resolve(p, true); errno == 0 {
		return k.writes[c]
	}
	return k.writes[c] + k.aliasWrites[c]
}

// firstSimPID keeps simulated processes clear of low pids (init, kthreads).
const firstSimPID = 4000

// process is a simulated holder of open device nodes under /proc/<pid>.
type process struct {
	pid int
	dir *node // /proc/<pid>
	fds *node // /proc/<pid>/fd
	n   int   // open fds
}

// addFD gives o (made when new) an fd linking to target.
func (k *Kernel) addFD(o Opener, target string) (*process, int) {
	pid := o.PID
	if pid == 0 {
		pid = k.nextPID
		k.nextPID++
	}
	p := k.procs[pid]
	if p == nil {
		comm := o.Comm
		if len(comm) > 15 { // TASK_COMM_LEN - 1
			comm = comm[:15]
		}
		p = &process{pid: pid, dir: k.mkdir(k.mustDir(sysfs.Proc), strconv.Itoa(pid))}
		k.constAttr(p.dir, "comm", comm+"\n")
		p.fds = k.mkdir(p.dir, "fd")
		k.procs[pid] = p
	}
	fd := 3 // 0-2 are stdio
	for ; p.fds.children[strconv.Itoa(fd)] != nil; fd++ {
	}
	l := k.newNode(strconv.Itoa(fd), kindLink, 0o700)
	l.target = target // absolute, as /proc's magic links read
	k.attach(p.fds, l)
	p.n++
	return p, fd
}

// dropFD closes fd of p; the process's directory goes with its last fd.
func (k *Kernel) dropFD(p *process, fd int) {
	if p == nil {
		return
	}
	k.detachNode(p.fds.children[strconv.Itoa(fd)])
	if p.n--; p.n == 0 {
		k.detachNode(p.dir)
		delete(k.procs, p.pid)
	}
}
