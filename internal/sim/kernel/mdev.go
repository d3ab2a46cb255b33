package simkernel

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"syscall"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// pool is what a parent's types draw on: MB of mbochs memory, mtty ports,
// GVT-g low GM/high GM/fences, an NVIDIA GPU's framebuffer. One pool may
// span several parents (the VFs of one A100) and carries NVIDIA's rule that
// a GPU hosts one type (or one size) at a time.
type pool struct {
	capacity []int
	mix      homogeneity
	uses     map[any]poolUse
}

type poolUse struct {
	key  string // type id, for mixByType
	size int    // framebuffer MB, for mixBySize
	cost []int
}

func newPool(capacity []int, mix homogeneity) *pool {
	return &pool{capacity: append([]int(nil), capacity...), mix: mix, uses: map[any]poolUse{}}
}

// available is how many more of (key, size, cost) fit.
func (p *pool) available(key string, size int, cost []int) int {
	return p.availableAs(p.mix, key, size, cost)
}

// availableAs is available under the mixing rule mix instead of the pool's
// own (NVIDIA's mixed-size mode lifts one size per GPU).
func (p *pool) availableAs(mix homogeneity, key string, size int, cost []int) int {
	used := make([]int, len(p.capacity))
	for _, u := range p.uses {
		switch {
		case mix == mixByType && u.key != key:
			return 0
		case mix == mixBySize && u.size != size:
			return 0
		}
		for i, c := range u.cost {
			used[i] += c
		}
	}
	n := math.MaxInt
	for i, c := range cost {
		if c > 0 {
			n = min(n, (p.capacity[i]-used[i])/c)
		}
	}
	if n == math.MaxInt || n < 0 {
		return 0
	}
	return n
}

type mdevParent struct {
	name      string
	dir       *node
	def       *mdevDef
	pool      *pool
	types     []*mdevType
	instances map[string]*mdevInst
	pci       *pciDev // nil for virtual parents
	gone      bool
}

type mdevType struct {
	def    *mdevTypeDef
	id     string // directory name, "<prefix>-<sysfsName>"
	dir    *node
	devs   *node
	parent *mdevParent
}

type mdevInst struct {
	uuid   string
	parent *mdevParent
	typ    *mdevType
	dir    *node
	group  *iommuGroup
	bound  bool // on its mdev driver: a VFIO device with /dev/vfio/<group>
	busy   bool // a remove is in progress
	gone   bool
	params string // NVIDIA's nvidia/vgpu_params
}

func (k *Kernel) registerMdevDriver(name string) {
	dir := k.mkdir(k.mustDir("/sys/bus/mdev/drivers"), name)
	// mdev_match never matches: instances are bound only at creation, so
	// bind is ENODEV once an instance has been unbound.
	k.attr(dir, "bind", nil, func(string) syscall.Errno { return syscall.ENODEV })
	k.attr(dir, "unbind", nil, func(s string) syscall.Errno { return k.storeMdevUnbind(name, s) })
	k.attr(dir, "uevent", nil, func(string) syscall.Errno { return 0 })
	k.mdevDrivers[name] = dir
}

// addVirtualParent builds a sample driver's parent device,
// /sys/devices/virtual/<class>/<class>, and registers its types.
func (k *Kernel) addVirtualParent(m *modelDef) {
	class := m.pfMdev.prefix
	dir := k.mkdirAll("/sys/devices/virtual/" + class + "/" + class)
	k.attr(dir, "uevent", func() string { return "" }, storeUevent)
	k.mkdir(dir, "power")
	classDir := k.mkdirAll("/sys/class/" + class)
	k.link(dir, "subsystem", classDir.path())
	k.link(classDir, class, dir.path())
	k.registerParent(class, dir, m.pfMdev, newPool(m.pfMdev.capacity, m.pfMdev.mix), nil)
}

// registerParent is mdev_register_parent: mdev_supported_types under the
// device and its /sys/class/mdev_bus link.
func (k *Kernel) registerParent(name string, dir *node, def *mdevDef, pl *pool, dev *pciDev) {
	p := &mdevParent{name: name, dir: dir, def: def, pool: pl, instances: map[string]*mdevInst{}, pci: dev}
	mst := k.mkdir(dir, "mdev_supported_types")
	for i := range def.types {
		t := &mdevType{def: &def.types[i], id: def.prefix + "-" + def.types[i].sysfsName, parent: p}
		t.dir = k.mkdir(mst, t.id)
		k.attr(t.dir, "create", nil, func(s string) syscall.Errno { return k.storeCreate(t, s) })
		k.constAttr(t.dir, "device_api", "vfio-pci\n")
		name := t.def.prettyName
		if name == "" {
			name = t.def.sysfsName // kernel >= 6.1 falls back to the sysfs name
		}
		k.constAttr(t.dir, "name", name+"\n")
		k.attr(t.dir, "available_instances", func() string { return fmt.Sprintf("%d\n", k.available(t)) }, nil)
		if t.def.description != "" {
			k.constAttr(t.dir, "description", t.def.description)
		}
		t.devs = k.mkdir(t.dir, "devices")
		p.types = append(p.types, t)
	}
	k.link(k.mustDir(sysfs.MdevBusClass), name, dir.path())
	if dev != nil {
		dev.mdev = p
	}
}

// unregisterParent removes the parent's instances (nothing is in use) and
// its types.
func (k *Kernel) unregisterParent(p *mdevParent) {
	for _, m := range p.sortedInstances() {
		k.removeMdev(m)
	}
	k.detachNode(p.dir.children["mdev_supported_types"])
	k.detachNode(k.mustDir(sysfs.MdevBusClass).children[p.name])
	p.gone = true
	if p.pci != nil {
		p.pci.mdev = nil
	}
}

func (p *mdevParent) sortedInstances() []*mdevInst {
	out := make([]*mdevInst, 0, len(p.instances))
	for _, m := range p.instances {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].uuid < out[j].uuid })
	return out
}

func (k *Kernel) available(t *mdevType) int {
	p := t.parent
	if p.gone {
		return 0
	}
	if p.def.perParent > 0 && len(p.instances) >= p.def.perParent {
		return 0
	}
	n := p.pool.available(t.id, t.def.sizeMB, t.def.cost)
	if p.def.perParent > 0 {
		n = min(n, p.def.perParent-len(p.instances))
	}
	return n
}

// storeCreate is create_store + mdev_device_create: EINVAL unless a UUID
// (36 characters, or 37 with a trailing byte), EEXIST if any parent has it,
// ENOSPC when the type has no room.
func (k *Kernel) storeCreate(t *mdevType, s string) syscall.Errno {
	if len(s) < 36 || len(s) > 37 || !isUUID(s[:36]) {
		return syscall.EINVAL
	}
	uuid := strings.ToLower(s[:36])
	if k.mdevs[uuid] != nil {
		return syscall.EEXIST
	}
	if t.parent.gone {
		return syscall.ENODEV
	}
	if k.available(t) < 1 {
		return syscall.ENOSPC
	}
	k.createMdev(t, uuid)
	return 0
}

func (k *Kernel) createMdev(t *mdevType, uuid string) *mdevInst {
	p := t.parent
	m := &mdevInst{uuid: uuid, parent: p, typ: t}
	m.dir = k.mkdir(p.dir, uuid)
	k.link(m.dir, "mdev_type", t.dir.path())
	k.attr(m.dir, "remove", nil, func(s string) syscall.Errno { return k.storeMdevRemove(m, s) })
	k.link(m.dir, "subsystem", "/sys/bus/mdev")
	k.attr(m.dir, "uevent", func() string {
		var b strings.Builder
		if m.bound {
			fmt.Fprintf(&b, "DRIVER=%s\n", p.def.driver)
		}
		fmt.Fprintf(&b, "MDEV_TYPE=%s\n", t.def.sysfsName)
		return b.String()
	}, storeUevent)
	k.mkdir(m.dir, "power")
	if p.def.vendorAttrs != nil {
		vd := k.mkdir(m.dir, p.def.vendorDir)
		attrs := p.def.vendorAttrs(uuid, t.def)
		for name, v := range attrs {
			k.constAttr(vd, name, v)
		}
		if p.def.vgpuParams {
			k.attr(vd, "vgpu_params", func() string { return m.params + "\n" },
				func(s string) syscall.Errno { return storeVGPUParams(&m.params, m.group, s) })
		}
	}
	k.link(t.devs, uuid, m.dir.path())
	k.link(k.mustDir(sysfs.MdevDevices), uuid, m.dir.path())
	m.group = k.allocGroup()
	m.group.mdev = m
	k.link(m.dir, "iommu_group", m.group.dir.path())
	k.link(m.group.devDir, uuid, m.dir.path())
	p.pool.uses[m] = poolUse{key: t.id, size: t.def.sizeMB, cost: t.def.cost}
	k.mdevs[uuid] = m
	p.instances[uuid] = m
	k.bindMdev(m)
	return m
}

func (k *Kernel) bindMdev(m *mdevInst) {
	drv := k.mdevDrivers[m.parent.def.driver]
	m.bound = true
	k.link(m.dir, "driver", drv.path())
	k.link(drv, m.uuid, m.dir.path())
	k.syncVFIO(m.group)
}

func (k *Kernel) unbindMdev(m *mdevInst) {
	if !m.bound {
		return
	}
	m.bound = false
	k.detachNode(m.dir.children["driver"])
	k.detachNode(k.mdevDrivers[m.parent.def.driver].children[m.uuid])
	k.syncVFIO(m.group)
}

// removeMdev tears an instance down; nobody holds it open.
func (k *Kernel) removeMdev(m *mdevInst) {
	if m.gone {
		return
	}
	k.unbindMdev(m)
	k.freeGroup(m.group)
	k.detachNode(m.typ.devs.children[m.uuid])
	k.detachNode(k.mustDir(sysfs.MdevDevices).children[m.uuid])
	k.detachNode(m.dir)
	delete(m.parent.pool.uses, m)
	delete(m.parent.instances, m.uuid)
	delete(k.mdevs, m.uuid)
	m.gone = true
	k.cond.Broadcast()
}

// storeMdevRemove is remove_store: a number or EINVAL; 0 does nothing;
// otherwise the instance goes once its VFIO user lets go.
func (k *Kernel) storeMdevRemove(m *mdevInst, s string) syscall.Errno {
	v, e := kstrtoul(s, 64)
	if e != 0 {
		return syscall.EINVAL
	}
	if v == 0 {
		return 0
	}
	k.waitFor(func() bool { return m.gone || !m.busy })
	if m.gone {
		return 0 // another writer removed it: device_remove_file_self lost the race
	}
	m.busy = true
	k.waitFor(func() bool { return m.gone || !m.group.inUse() })
	m.busy = false
	k.removeMdev(m)
	k.cond.Broadcast()
	return 0
}

func (k *Kernel) storeMdevUnbind(drvName, s string) syscall.Errno {
	m := k.mdevs[strings.TrimSuffix(s, "\n")]
	if m == nil || !m.bound || m.parent.def.driver != drvName {
		return syscall.ENODEV
	}
	k.waitFor(func() bool { return m.gone || !m.busy })
	if m.gone || !m.bound {
		return 0
	}
	m.busy = true
	k.waitFor(func() bool { return m.gone || !m.group.inUse() })
	m.busy = false
	if !m.gone {
		k.unbindMdev(m)
	}
	k.cond.Broadcast()
	return 0
}
