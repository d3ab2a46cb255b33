package simkernel

import (
	"io/fs"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"
)

type nodeKind uint8

const (
	kindDir nodeKind = iota
	kindFile
	kindLink
	kindDev
)

// node is one entry of the simulated tree. Attribute files carry show/store
// callbacks that compute their content from the kernel state on demand, as a
// sysfs attribute does; they run with Kernel.mu held.
type node struct {
	name     string
	parent   *node
	kind     nodeKind
	perm     fs.FileMode // permission bits only
	ino      uint64
	mtime    time.Time
	children map[string]*node // kindDir
	target   string           // kindLink, relative as sysfs stores it
	show     func() string
	store    func(s string) syscall.Errno
	group    *iommuGroup // kindDev: the VFIO group a /dev/vfio/N node opens; nil for /dev/vfio/vfio
	opens    int         // kindDev: open handles
}

// maxLinkHops is the kernel's limit on symlinks followed in one lookup (ELOOP).
const maxLinkHops = 40

func (k *Kernel) newNode(name string, kind nodeKind, perm fs.FileMode) *node {
	k.nextIno++
	n := &node{name: name, kind: kind, perm: perm, ino: k.nextIno, mtime: k.clock()}
	if kind == kindDir {
		n.children = map[string]*node{}
	}
	return n
}

func (n *node) path() string {
	if n.parent == n {
		return "/"
	}
	var parts []string
	for c := n; c.parent != c; c = c.parent {
		parts = append(parts, c.name)
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return "/" + strings.Join(parts, "/")
}

// lookup resolves p (absolute, or relative to cur) the way path walking in
// the VFS does: symlinks in the middle are followed, ".." after a link goes
// to the link target's parent.
func (k *Kernel) lookup(cur *node, p string, followLast bool, hops *int) (*node, syscall.Errno) {
	if strings.HasPrefix(p, "/") {
		cur = k.root
	}
	comps := splitPath(p)
	for i, c := range comps {
		last := i == len(comps)-1
		if cur.kind != kindDir {
			return nil, syscall.ENOTDIR
		}
		child := cur.step(c)
		if child == nil {
			return nil, syscall.ENOENT
		}
		if child.kind == kindLink && (!last || followLast) {
			*hops++
			if *hops > maxLinkHops {
				return nil, syscall.ELOOP
			}
			t, errno := k.lookup(cur, child.target, true, hops)
			if errno != 0 {
				return nil, errno
			}
			child = t
		}
		cur = child
	}
	return cur, 0
}

// step is one component of a walk from the directory n: "." is n, ".." its
// parent (the root's is itself), a name the entry it holds, not followed if
// a link; nil when there is none.
func (n *node) step(c string) *node {
	switch c {
	case ".":
		return n
	case "..":
		return n.parent
	}
	return n.children[c]
}

func (k *Kernel) resolve(p string, followLast bool) (*node, syscall.Errno) {
	hops := 0
	return k.lookup(k.root, "/"+p, followLast, &hops)
}

// canonical returns the symlink-free path of p, resolving as much of it as
// exists and appending the rest as written, so that a path used before it
// exists (a fault on a VF not yet created) still matches later.
func (k *Kernel) canonical(p string) string {
	comps := splitPath(p)
	cur := k.root
	for i, c := range comps {
		if cur.kind != kindDir {
			return path.Join(append([]string{cur.path()}, comps[i:]...)...)
		}
		child := cur.step(c)
		if child == nil {
			return path.Join(append([]string{cur.path()}, comps[i:]...)...)
		}
		if child.kind == kindLink {
			hops := 0
			t, errno := k.lookup(cur, child.target, true, &hops)
			if errno != 0 {
				return path.Join(append([]string{cur.path()}, comps[i:]...)...)
			}
			child = t
		}
		cur = child
	}
	return cur.path()
}

func splitPath(p string) []string {
	raw := strings.Split(p, "/")
	out := raw[:0]
	for _, c := range raw {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// mkdirAll returns the directory at the absolute path p, creating what is
// missing. It does not follow symlinks: the builders only name real dirs.
func (k *Kernel) mkdirAll(p string) *node {
	cur := k.root
	for _, c := range splitPath(p) {
		child, ok := cur.children[c]
		if !ok {
			child = k.newNode(c, kindDir, 0o755)
			k.attach(cur, child)
		}
		cur = child
	}
	return cur
}

func (k *Kernel) attach(dir, child *node) {
	child.parent = dir
	dir.children[child.name] = child
	dir.mtime = k.clock()
}

func (k *Kernel) detachNode(n *node) {
	if n == nil || n.parent == nil || n.parent == n {
		return
	}
	if n.parent.children[n.name] == n {
		delete(n.parent.children, n.name)
		n.parent.mtime = k.clock()
	}
}

func (k *Kernel) mkdir(dir *node, name string) *node {
	if c, ok := dir.children[name]; ok && c.kind == kindDir {
		return c
	}
	n := k.newNode(name, kindDir, 0o755)
	k.attach(dir, n)
	return n
}

// attr modes as sysfs sets them from the presence of show and store.
const (
	modeRO fs.FileMode = 0o444
	modeRW fs.FileMode = 0o644
	modeWO fs.FileMode = 0o200
)

func (k *Kernel) attr(dir *node, name string, show func() string, store func(string) syscall.Errno) *node {
	var perm fs.FileMode
	switch {
	case show != nil && store != nil:
		perm = modeRW
	case store != nil:
		perm = modeWO
	default:
		perm = modeRO
	}
	n := k.newNode(name, kindFile, perm)
	n.show, n.store = show, store
	k.attach(dir, n)
	return n
}

// constAttr is a read-only attribute with fixed content.
func (k *Kernel) constAttr(dir *node, name, content string) *node {
	return k.attr(dir, name, func() string { return content }, nil)
}

// link creates dir/name pointing at the absolute path target, stored
// relative as sysfs does ("../../../devices/...").
func (k *Kernel) link(dir *node, name, target string) *node {
	n := k.newNode(name, kindLink, 0o777)
	n.target = relPath(dir.path(), target)
	k.detachNode(dir.children[name])
	k.attach(dir, n)
	return n
}

// relPath returns target relative to the directory from, both absolute.
func relPath(from, target string) string {
	f, t := splitPath(from), splitPath(target)
	// As kernfs_get_target_path: the walk up stops at an ancestor of the
	// target's parent, so a link to an ancestor names it ("../../../BDF").
	i := 0
	for i < len(f) && i < len(t)-1 && f[i] == t[i] {
		i++
	}
	var parts []string
	for range f[i:] {
		parts = append(parts, "..")
	}
	parts = append(parts, t[i:]...)
	if len(parts) == 0 {
		return "."
	}
	return strings.Join(parts, "/")
}

// fileInfo is what Lstat/Stat/ReadDir report, shaped like sysfs: attribute
// files are 4096 bytes whatever they hold, links are 0777.
type fileInfo struct {
	name  string
	size  int64
	mode  fs.FileMode
	mtime time.Time
	sys   *NodeSys
}

// NodeSys is FileInfo.Sys() for simulated nodes: the stable inode number a
// FUSE layer can hand out.
type NodeSys struct {
	Ino uint64
}

// Inode is the node's inode number: a node made again (a parent bound
// again, its mdev_supported_types with it) gets a new one, as in kernfs.
func (s *NodeSys) Inode() uint64 { return s.Ino }

func (fi *fileInfo) Name() string       { return fi.name }
func (fi *fileInfo) Size() int64        { return fi.size }
func (fi *fileInfo) Mode() fs.FileMode  { return fi.mode }
func (fi *fileInfo) ModTime() time.Time { return fi.mtime }
func (fi *fileInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi *fileInfo) Sys() any           { return fi.sys }

func (n *node) info(name string) *fileInfo {
	fi := &fileInfo{name: name, mtime: n.mtime, sys: &NodeSys{Ino: n.ino}}
	switch n.kind {
	case kindDir:
		fi.mode = fs.ModeDir | n.perm
	case kindFile:
		fi.mode = n.perm
		fi.size = 4096
	case kindLink:
		fi.mode = fs.ModeSymlink | 0o777
	case kindDev:
		fi.mode = fs.ModeDevice | fs.ModeCharDevice | n.perm
	}
	return fi
}

type dirEntry struct{ fi *fileInfo }

func (d dirEntry) Name() string               { return d.fi.name }
func (d dirEntry) IsDir() bool                { return d.fi.IsDir() }
func (d dirEntry) Type() fs.FileMode          { return d.fi.mode.Type() }
func (d dirEntry) Info() (fs.FileInfo, error) { return d.fi, nil }
func (d dirEntry) String() string             { return fs.FormatDirEntry(d) }

func (n *node) entries() []fs.DirEntry {
	names := make([]string, 0, len(n.children))
	for name := range n.children {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]fs.DirEntry, 0, len(names))
	for _, name := range names {
		out = append(out, dirEntry{n.children[name].info(name)})
	}
	return out
}
