package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
)

// FSName is the mount's source and subtype: /proc/self/mountinfo shows
// "fuse.vgpusim ... vgpusim".
const FSName = "vgpusim"

// attrSize is what sysfs reports as every attribute's size.
const attrSize = 4096

// Option configures Mount.
type Option func(*config)

type config struct {
	debug *log.Logger
}

// WithDebug logs every FUSE request and reply to l.
func WithDebug(l *log.Logger) Option { return func(c *config) { c.debug = l } }

// Mount is a kernel served at a directory.
type Mount struct {
	dir    string
	server *fuse.Server
	holds  *Holds
	ended  chan struct{} // closed when the kernel has ended the FUSE connection
}

// New mounts k at dir (which must exist) and serves it until Unmount.
func New(dir string, k *simkernel.Kernel, opts ...Option) (*Mount, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	rootInfo, err := k.Lstat("/")
	if err != nil {
		return nil, fmt.Errorf("mount simulated sysfs at %s: stat the kernel's root: %w", dir, err)
	}
	fsys := &filesystem{k: k, holds: newHolds(k.Canonical)}
	zero := time.Duration(0)
	mo := fuse.MountOptions{
		FsName:            FSName,
		Name:              FSName,
		DirectMountStrict: true, // root mounts with mount(2); no fusermount needed
		DisableXAttrs:     true,
		// READDIRPLUS would make the kernel cache what a readdir saw.
		DisableReadDirPlus: true,
		MaxWrite:           1 << 17,
	}
	if c.debug != nil {
		mo.Debug, mo.Logger = true, c.debug
	}
	root := &node{fsys: fsys, path: "/", mode: syscall.S_IFDIR | 0o755}
	server, err := gofs.Mount(dir, root, &gofs.Options{
		MountOptions:    mo,
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		NullPermissions: true, // modes as the kernel gives them
		RootStableAttr:  &gofs.StableAttr{Ino: inoOf(rootInfo)},
	})
	if err != nil {
		return nil, fmt.Errorf("mount simulated sysfs at %s: %w", dir, err)
	}
	m := &Mount{dir: dir, server: server, holds: fsys.holds, ended: make(chan struct{})}
	go func() { server.Wait(); close(m.ended) }()
	return m, nil
}

// Dir is the mount point.
func (m *Mount) Dir() string { return m.dir }

// Holds are the mount's held writes.
func (m *Mount) Holds() *Holds { return m.holds }

// Wait returns when the kernel has ended the FUSE connection: after
// Unmount, or an unmount from outside.
func (m *Mount) Wait() { <-m.ended }

// connectionGrace is how long Unmount waits for the kernel to end the
// connection once the mount is gone from this namespace.
const connectionGrace = 2 * time.Second

// Unmount fails held writes with EIO (the host is going away) and unmounts.
// While a process still has a file open the kernel refuses (EBUSY); after
// a few tries the mount is detached lazily, lazy reports so, and the kernel
// drops it when the last user lets go.
//
// Unmount does not wait for the connection to end beyond a short grace:
// a mount namespace created while the mount existed (unshare, a systemd
// service with PrivateTmp) holds a copy of it, and keeps the connection
// alive for as long as it lives. Closing /dev/fuse, which the process's
// exit does, aborts the connection everywhere.
func (m *Mount) Unmount() (lazy bool, err error) {
	m.holds.ReleaseAll(syscall.EIO)
	delay := 5 * time.Millisecond
	for try := 0; ; try++ {
		err = unix.Unmount(m.dir, 0)
		if err == nil || !errors.Is(err, unix.EBUSY) || try == 5 {
			break
		}
		time.Sleep(delay)
		delay *= 2
	}
	switch {
	case errors.Is(err, unix.EBUSY):
		if derr := unix.Unmount(m.dir, unix.MNT_DETACH); derr != nil {
			return false, fmt.Errorf("unmount %s: %w; detach: %w", m.dir, err, derr)
		}
		lazy = true
	case err != nil:
		return false, fmt.Errorf("unmount %s: %w", m.dir, err)
	}
	select {
	case <-m.ended:
	case <-time.After(connectionGrace):
	}
	return lazy, nil
}

type filesystem struct {
	k     *simkernel.Kernel
	holds *Holds
}

// inoOf is the inode number the kernel gave fi's node. kernfs numbers each
// node anew when it is made, so a directory removed and made again at the
// same path (a parent driver bound anew) has a new number; the kernel's
// numbers only grow, so go-fuse never sees one reused.
func inoOf(fi fs.FileInfo) uint64 {
	if s, ok := fi.Sys().(*simkernel.NodeSys); ok {
		return s.Ino
	}
	return 0 // not the simulated kernel's: go-fuse numbers it
}

// write is one write(2): held if a hold says so, then one kernel write.
func (f *filesystem) write(p string, data []byte) (uint32, syscall.Errno) {
	if errno := f.holds.wait(p); errno != 0 {
		return 0, errno
	}
	if err := f.k.WriteFile(p, data); err != nil {
		return 0, errnoOf(err)
	}
	return uint32(len(data)), 0
}

// errnoOf is the kernel's errno in err; EIO if it carries none.
func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return syscall.EIO
}

// kindOf maps a kernel file mode to the FUSE file type. Device nodes are
// served as regular files: see the package comment.
func kindOf(m fs.FileMode) uint32 {
	switch {
	case m.IsDir():
		return syscall.S_IFDIR
	case m&fs.ModeSymlink != 0:
		return syscall.S_IFLNK
	default:
		return syscall.S_IFREG
	}
}

func isDevice(m fs.FileMode) bool { return m&fs.ModeDevice != 0 }

// node is one path of the kernel's tree, symlink-free (the VFS follows
// links itself through Readlink). It holds no state of its own: every
// call asks the kernel.
type node struct {
	gofs.Inode
	fsys *filesystem
	path string
	mode uint32 // type and permissions when last seen, for fstat on a vanished file
}

var (
	_ gofs.NodeLookuper   = (*node)(nil)
	_ gofs.NodeGetattrer  = (*node)(nil)
	_ gofs.NodeSetattrer  = (*node)(nil)
	_ gofs.NodeReadlinker = (*node)(nil)
	_ gofs.NodeReaddirer  = (*node)(nil)
	_ gofs.NodeOpener     = (*node)(nil)
	_ gofs.NodeCreater    = (*node)(nil)
	_ gofs.NodeMkdirer    = (*node)(nil)
	_ gofs.NodeMknoder    = (*node)(nil)
	_ gofs.NodeSymlinker  = (*node)(nil)
	_ gofs.NodeLinker     = (*node)(nil)
	_ gofs.NodeUnlinker   = (*node)(nil)
	_ gofs.NodeRmdirer    = (*node)(nil)
	_ gofs.NodeRenamer    = (*node)(nil)
	_ gofs.NodeStatfser   = (*node)(nil)
)

func (n *node) fill(fi fs.FileInfo, ino uint64, out *fuse.Attr) {
	m := fi.Mode()
	out.Ino = ino
	out.Mode = kindOf(m) | uint32(m.Perm())
	out.Nlink = 1
	if m.IsDir() {
		out.Nlink = 2
	}
	out.Size = uint64(fi.Size())
	if isDevice(m) {
		out.Size = 0
	}
	out.Blksize = attrSize
	mt := fi.ModTime()
	out.SetTimes(&mt, &mt, &mt)
}

// gone says whether n's node has been removed, its path empty or holding
// a node made since (a directory opened before its parent's rebind).
func (n *node) gone() bool {
	fi, err := n.fsys.k.Lstat(n.path)
	return err != nil || inoOf(fi) != n.StableAttr().Ino
}

// Lookup implements gofs.NodeLookuper.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if n.gone() {
		return nil, syscall.ENOENT // a removed directory has no children in kernfs
	}
	p := path.Join(n.path, name)
	fi, err := n.fsys.k.Lstat(p)
	if err != nil {
		return nil, errnoOf(err)
	}
	kind := kindOf(fi.Mode())
	ino := inoOf(fi)
	n.fill(fi, ino, &out.Attr)
	child := &node{fsys: n.fsys, path: p, mode: out.Attr.Mode}
	return n.NewInode(ctx, child, gofs.StableAttr{Mode: kind, Ino: ino}), 0
}

// Getattr implements gofs.NodeGetattrer. An open file whose node is gone
// still answers fstat, with no links, as on any filesystem; a node made
// again at the same path is another node, not this one.
func (n *node) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fi, err := n.fsys.k.Lstat(n.path)
	if err == nil && inoOf(fi) != n.StableAttr().Ino {
		err = syscall.ENOENT
	}
	if err != nil {
		if f == nil {
			return errnoOf(err)
		}
		out.Ino = n.StableAttr().Ino
		out.Mode = n.mode
		out.Nlink = 0
		return 0
	}
	n.fill(fi, n.StableAttr().Ino, &out.Attr)
	return 0
}

// Setattr implements gofs.NodeSetattrer. kernfs accepts and ignores a size
// change (the O_TRUNC of `echo 1 > attr`) and times; the simulation keeps
// no owners or modes, so changing those is refused.
func (n *node) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if _, ok := in.GetMode(); ok {
		return syscall.EPERM
	}
	if _, ok := in.GetUID(); ok {
		return syscall.EPERM
	}
	if _, ok := in.GetGID(); ok {
		return syscall.EPERM
	}
	return n.Getattr(ctx, f, out)
}

// Readlink implements gofs.NodeReadlinker: the relative target as stored.
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	t, err := n.fsys.k.Readlink(n.path)
	if err != nil {
		return nil, errnoOf(err)
	}
	return []byte(t), 0
}

// Readdir implements gofs.NodeReaddirer.
func (n *node) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	if n.gone() {
		return gofs.NewListDirStream(nil), 0 // kernfs lists a removed directory empty
	}
	ents, err := n.fsys.k.ReadDir(n.path)
	if err != nil {
		return nil, errnoOf(err)
	}
	out := make([]fuse.DirEntry, 0, len(ents))
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return nil, errnoOf(err)
		}
		out = append(out, fuse.DirEntry{Name: e.Name(), Mode: kindOf(e.Type()), Ino: inoOf(fi)})
	}
	return gofs.NewListDirStream(out), 0
}

// Open implements gofs.NodeOpener.
func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fi, err := n.fsys.k.Lstat(n.path)
	if err != nil {
		return nil, 0, errnoOf(err)
	}
	if inoOf(fi) != n.StableAttr().Ino {
		return nil, 0, syscall.ENODEV // a removed node, as kernfs's open answers (kernfs_get_active fails)
	}
	m := fi.Mode()
	if m.IsDir() {
		if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
			return nil, 0, syscall.EISDIR
		}
		return nil, 0, 0
	}
	// Every handle is direct_io: no page cache between the caller and
	// the kernel. Parallel writes keep a blocked write from holding the
	// inode lock against the other writers of the same attribute. Nothing
	// is buffered, so close(2) needs no FLUSH round trip.
	const fuseFlags = fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES | fuse.FOPEN_NOFLUSH
	if isDevice(m) {
		h, err := n.fsys.k.OpenAs(callerOf(ctx), n.path)
		if err != nil {
			return nil, 0, errnoOf(err)
		}
		return &deviceHandle{h: h}, fuseFlags, 0
	}
	acc := flags & syscall.O_ACCMODE
	readable, writable := m.Perm()&0o444 != 0, m.Perm()&0o222 != 0
	if (acc != syscall.O_WRONLY && !readable) || (acc != syscall.O_RDONLY && !writable) {
		return nil, 0, syscall.EACCES
	}
	return &attrHandle{fsys: n.fsys, path: n.path}, fuseFlags, 0
}

// Create implements gofs.NodeCreater: sysfs creates no files (EACCES, as
// the VFS answers for a directory without a create operation).
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EACCES
}

// Mkdir implements gofs.NodeMkdirer; the VFS answers EPERM for sysfs.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Mknod implements gofs.NodeMknoder.
func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Symlink implements gofs.NodeSymlinker.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Link implements gofs.NodeLinker.
func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Unlink implements gofs.NodeUnlinker.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno { return syscall.EPERM }

// Rmdir implements gofs.NodeRmdirer.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno { return syscall.EPERM }

// Rename implements gofs.NodeRenamer.
func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return syscall.EPERM
}

// Statfs implements gofs.NodeStatfser with what sysfs reports.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	out.Bsize = attrSize
	out.Frsize = attrSize
	out.NameLen = 255
	return 0
}

// attrHandle is an open attribute file.
type attrHandle struct {
	fsys *filesystem
	path string

	mu   sync.Mutex
	buf  []byte // show's output from the last read at offset 0
	have bool
}

var (
	_ gofs.FileReader = (*attrHandle)(nil)
	_ gofs.FileWriter = (*attrHandle)(nil)
)

// Read implements gofs.FileReader. A file removed since open reads ENODEV,
// as kernfs answers once the node is deactivated.
func (h *attrHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if off == 0 || !h.have {
		b, err := h.fsys.k.ReadFile(h.path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, syscall.ENODEV
			}
			return nil, errnoOf(err)
		}
		h.buf, h.have = b, true
	}
	if off >= int64(len(h.buf)) {
		return fuse.ReadResultData(nil), 0
	}
	end := min(int64(len(h.buf)), off+int64(len(dest)))
	return fuse.ReadResultData(h.buf[off:end]), 0
}

// Write implements gofs.FileWriter: one kernel write per write(2).
func (h *attrHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, errno := h.fsys.write(h.path, data)
	if errno == syscall.ENOENT {
		errno = syscall.ENODEV // removed since open
	}
	return n, errno
}

// deviceHandle is an open /dev/vfio node: the VFIO group held until release.
type deviceHandle struct {
	h *simkernel.DeviceHandle
}

var (
	_ gofs.FileReader   = (*deviceHandle)(nil)
	_ gofs.FileWriter   = (*deviceHandle)(nil)
	_ gofs.FileReleaser = (*deviceHandle)(nil)
)

// Read implements gofs.FileReader: a VFIO group has no read (EINVAL).
func (d *deviceHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return nil, syscall.EINVAL
}

// Write implements gofs.FileWriter: a VFIO group has no write (EINVAL).
func (d *deviceHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	return 0, syscall.EINVAL
}

// Release implements gofs.FileReleaser: the group is free again.
func (d *deviceHandle) Release(ctx context.Context) syscall.Errno {
	if err := d.h.Close(); err != nil {
		return errnoOf(err)
	}
	return 0
}

// callerOf is the process opening a device through the mount, so that the
// fake's /proc shows it holding the node as the real /proc would. FUSE names
// the calling thread; /proc/<tid>/status gives its process (Tgid).
func callerOf(ctx context.Context) simkernel.Opener {
	c, ok := fuse.FromContext(ctx)
	if !ok || c.Pid == 0 {
		return simkernel.Opener{Comm: "unknown"}
	}
	tid := strconv.Itoa(int(c.Pid))
	o := simkernel.Opener{PID: int(c.Pid), Comm: "unknown"}
	if b, err := os.ReadFile("/proc/" + tid + "/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
				if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					o.PID = pid
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/" + tid + "/comm"); err == nil {
		o.Comm = strings.TrimSpace(string(b))
	}
	return o
}
