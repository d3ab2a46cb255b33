package mdev

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"sync"
	"syscall"

	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// TypeCache keeps what a parent's driver fixes about each of its mdev
// types (name, description, device_api) for as long as the parent's
// mdev_supported_types directory lives. The driver creates that directory
// when it registers the parent (mdev_register_parent, at each probe) and
// it goes with the unbind or the unload; kernfs gives every new directory
// a new inode number, so the number tells one registration from the next.
// The live counters (available_instances) and the instances are read each
// time. Safe for concurrent use.
type TypeCache struct {
	mu      sync.Mutex
	parents map[string]registration
}

// registration is what one registration of a parent fixed.
type registration struct {
	ino   uint64
	fixed map[string]Type // by type id: ID, Name, Description, DeviceAPI
}

// NewTypeCache returns an empty cache.
func NewTypeCache() *TypeCache { return &TypeCache{parents: map[string]registration{}} }

// CachedFS is an FS whose mdev types Types reads through a TypeCache.
// With Lean, a type's available_instances is read only where Counted says
// it counts; elsewhere AvailableInstances is Unread.
type CachedFS struct {
	sysfs.FS
	Types *TypeCache
	Lean  bool
}

// WithTypeCache returns f reading mdev types through c.
func WithTypeCache(f sysfs.FS, c *TypeCache) CachedFS { return CachedFS{FS: f, Types: c} }

// LeanWithTypeCache is WithTypeCache reading available_instances only
// where it counts (Counted): what labelling a GPU with its profile needs,
// one kernel access less per type that states its count.
func LeanWithTypeCache(f sysfs.FS, c *TypeCache) CachedFS {
	return CachedFS{FS: f, Types: c, Lean: true}
}

// Unread is AvailableInstances where a lean read did not read it.
const Unread = -1

// Counted reports whether t's available_instances says something its
// fixed attributes do not: how many fit where the description gives no
// max_instance, and GVT-g's room (IsGVTg). Profile resolution reads it
// there only.
func Counted(t Type) bool { return t.MaxInstances == 0 || IsGVTg(t.ID) }

// inode is the inode number fi reports, false where its filesystem keeps
// none (then nothing is cached).
func inode(fi fs.FileInfo) (uint64, bool) {
	switch s := fi.Sys().(type) {
	case *syscall.Stat_t:
		return s.Ino, s.Ino != 0
	case interface{ Inode() uint64 }:
		return s.Inode(), s.Inode() != 0
	}
	return 0, false
}

// types is Types with the fixed attributes from c where the parent's
// registration is the one they were read under.
func (c *TypeCache) types(f sysfs.FS, parent string, lean bool) ([]Type, error) {
	if err := checkParentName(parent); err != nil {
		return nil, err
	}
	dir := parentDir(parent) + "/mdev_supported_types"
	fi, err := f.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w %s (no %s; is its vendor driver loaded?)", ErrNoParent, parent, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", dir, err)
	}
	ino, ok := inode(fi)
	if !ok {
		return Types(f, parent)
	}
	ids, err := sysfs.Names(f, dir)
	if err != nil {
		return nil, err
	}
	sort.Strings(ids)
	c.mu.Lock()
	reg := c.parents[parent]
	c.mu.Unlock()
	if reg.ino != ino {
		reg = registration{ino: ino, fixed: map[string]Type{}}
	}
	instances, err := instancesByType(f, parent)
	if err != nil {
		return nil, err
	}
	out := make([]Type, 0, len(ids))
	fresh := map[string]Type{}
	for _, id := range ids {
		t, known := reg.fixed[id]
		if !known {
			if t, err = readFixed(f, parent, id); err != nil {
				return nil, fmt.Errorf("read mdev types of %s: %w", parent, err)
			}
			fresh[id] = t
		}
		if lean && !Counted(t) {
			t.AvailableInstances, t.Instances = Unread, instances[id]
		} else if t, err = readLive(f, parent, t, instances); err != nil {
			return nil, fmt.Errorf("read mdev types of %s: %w", parent, err)
		}
		out = append(out, t)
	}
	if len(fresh) > 0 {
		c.mu.Lock()
		cur := c.parents[parent]
		fixed := make(map[string]Type, len(cur.fixed)+len(fresh))
		if cur.ino == ino {
			for id, t := range cur.fixed {
				fixed[id] = t
			}
		}
		for id, t := range fresh {
			fixed[id] = t
		}
		c.parents[parent] = registration{ino: ino, fixed: fixed}
		c.mu.Unlock()
	}
	return out, nil
}

// instancesByType lists parent's mdevs by type, sorted: the mdevs are the
// parent device's children, each with its mdev_type link (one listing and
// one link per mdev, where each type's devices/ would cost one listing
// per type, most of them empty).
func instancesByType(f sysfs.FS, parent string) (map[string][]string, error) {
	names, err := sysfs.Names(f, parentDir(parent))
	if err != nil {
		return nil, fmt.Errorf("list the mdevs of %s: %w", parent, err)
	}
	sort.Strings(names)
	out := map[string][]string{}
	for _, n := range names {
		if len(n) != 36 {
			continue // an attribute, a VF's link: not an mdev
		}
		if _, err := uuid.Parse(n); err != nil {
			continue
		}
		typ, ok, err := sysfs.LinkBase(f, parentDir(parent)+"/"+n+"/mdev_type")
		if err != nil {
			return nil, fmt.Errorf("list the mdevs of %s: %w", parent, err)
		}
		if ok { // else removed while we listed
			out[typ] = append(out[typ], n)
		}
	}
	return out, nil
}
