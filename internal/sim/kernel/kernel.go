package simkernel

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Kernel is one simulated host: the sysfs tree, /dev/vfio and the state
// behind them. All methods are safe for concurrent use; one mutex guards
// everything, and writes that block on a real kernel (sriov_numvfs=0, mdev
// remove, unbind while a VFIO user holds the group) wait on a condition
// variable with the mutex released.
type Kernel struct {
	mu    sync.Mutex
	cond  *sync.Cond
	root  *node
	clock func() time.Time
	host  Host

	nextIno      uint64
	devs         map[string]*pciDev // by name "0000:03:00.0"
	drivers      []*pciDriver       // probe (registration) order
	drvByName    map[string]*pciDriver
	mdevDrivers  map[string]*node // /sys/bus/mdev/drivers/<name>
	kvmgt        bool             // module kvmgt is loaded (gvtg.go)
	groups       map[int]*iommuGroup
	mdevs        map[string]*mdevInst // by lower-case UUID
	busAutoprobe bool
	removed      []*pciDev // hot-removed PFs and root ports; /sys/bus/pci/rescan restores them

	writes      map[string]int // by canonical path
	aliasWrites map[string]int // by the path the caller used, when it differs
	faults      map[int]*faultState
	nextFault   int

	gim  *gimState    // old GIM while loaded
	ngim *newGIMState // new GIM while loaded
	mig  MIGHost      // the nvidia driver's MIG side (nil: MIG off everywhere)

	probes  []Probe          // every driver probe, for tests (the kernel log)
	procs   map[int]*process // /proc/<pid>: the simulated holders of open device nodes
	nextPID int
	// private are the pids whose open files a reader may not see
	// (SetFDsUnreadable).
	private map[int]bool
}

var _ sysfs.FS = (*Kernel)(nil)

type pciDev struct {
	name   string
	addr   pci.Address
	ids    pciIDs
	model  *modelDef // nil for root ports
	bridge bool
	// secondaryBus is the bus behind a root port.
	secondaryBus uint8
	dir          *node
	parent       string // path of the directory the device dir lives in
	numa         int

	driver   *pciDriver
	override string // "" when unset ("(null)")
	group    *iommuGroup
	// oldGroup is the group a removed device was in: a rescan puts it back
	// with the functions it shared that group with.
	oldGroup *iommuGroup
	enabled  bool
	resets   []string
	busy     bool // device_lock held by a blocking operation
	gone     bool // removed from the tree

	sriov   *sriovState // PFs with the capability
	pf      *pciDev     // VFs
	vfIndex int

	mdev *mdevParent // while the vendor driver has registered the device as a parent
	nv   *nvVF       // NVIDIA per-VF vGPU state while on nvidia
	xe   *xeAdmin    // Intel xe's sriov_admin/ while xe drives the PF in PF mode
	// nvProc is the nvidia driver's /proc entry of a PF (nil before it
	// first bound; dir nil while unbound).
	nvProc *nvGPU

	bootDriver string // what the host file asked for at boot
	bootVGA    bool   // the firmware's boot display (boot_vga 1)
}

func (d *pciDev) isVF() bool { return d.pf != nil }

type sriovState struct {
	def       *sriovDef
	num       int
	autoprobe bool
	vfs       []*pciDev
	// driverCap is what the bound vendor driver set sriov_totalvfs to
	// (xe's max_vfs); 0 none.
	driverCap int
	mdevPool  *pool // A100: the GPU's framebuffer shared by the VFs' mdevs
	nvPool    *pool // L40S: the GPU's framebuffer shared by the VFs' vGPU types
}

type pciDriver struct {
	def    driverDef
	dir    *node
	dynIDs []pciID
}

type iommuGroup struct {
	id     int
	dir    *node
	devDir *node
	vfio   *node // /dev/vfio/<id> while a member is on a VFIO driver
	// pcis are the group's PCI functions: one, or several behind a port
	// without ACS and on a multi-function card.
	pcis []*pciDev
	mdev *mdevInst
}

// New builds the tree for host: devices bound to their boot drivers,
// no VFs, no mdevs, as after a reboot.
func New(host Host) (*Kernel, error) {
	if err := host.Validate(); err != nil {
		return nil, fmt.Errorf("simkernel: invalid host: %w", err)
	}
	k := &Kernel{
		clock:        time.Now,
		host:         host,
		devs:         map[string]*pciDev{},
		drvByName:    map[string]*pciDriver{},
		mdevDrivers:  map[string]*node{},
		groups:       map[int]*iommuGroup{},
		mdevs:        map[string]*mdevInst{},
		busAutoprobe: true,
		writes:       map[string]int{},
		aliasWrites:  map[string]int{},
		faults:       map[int]*faultState{},
		procs:        map[int]*process{},
		private:      map[int]bool{},
		nextPID:      firstSimPID,
	}
	k.cond = sync.NewCond(&k.mu)
	k.root = k.newNode("", kindDir, 0o755)
	k.root.parent = k.root
	k.buildSkeleton()
	if host.Guest == GuestQEMU {
		a := qemuHostBridge()
		k.addPCIDevice(&pciDev{name: a.String(), addr: a, ids: qemuHostBridgeIDs(), numa: -1}, fmt.Sprintf("/sys/devices/pci%04x:00", a.Domain))
	}
	for p, data := range host.Files {
		k.putHostFile(p, data)
	}
	k.loadDrivers()

	occupied := map[pci.Address]bool{}
	for i, g := range host.GPUs {
		m, _ := lookupModel(g.Model)
		if m.virtual {
			continue
		}
		pf := host.gpuAddress(i)
		occupied[pf] = true
		for _, f := range m.functions {
			fa := pf
			fa.Function = f.fn
			occupied[fa] = true
		}
		if m.sriov != nil {
			for n := 0; n < m.sriov.total; n++ {
				vf, _ := vfAddress(pf, m.sriov, n)
				occupied[vf] = true
			}
		}
	}
	for i, g := range host.GPUs {
		m, _ := lookupModel(g.Model)
		if m.virtual {
			k.addVirtualParent(m)
			continue
		}
		addr := host.gpuAddress(i)
		if g.ApertureMB != 0 {
			m.pfMdev = gvtgTypes(g.ApertureMB)
		}
		parentDir := k.rootPortFor(addr, g.NUMANode, occupied)
		d := &pciDev{
			name: addr.String(), addr: addr, ids: m.ids, model: m, numa: g.NUMANode,
			resets: append([]string(nil), m.resets...), bootDriver: g.Driver, bootVGA: g.BootVGA,
		}
		if m.sriov != nil {
			d.sriov = &sriovState{def: m.sriov, autoprobe: true}
			if m.vfMdev != nil {
				d.sriov.mdevPool = newPool(m.vfMdev.capacity, m.vfMdev.mix)
			}
			if m.vfNV != nil {
				d.sriov.nvPool = newPool([]int{m.vfNV.capacityMB}, mixBySize)
			}
		}
		if g.SharedGroup {
			d.group = k.devByPath(parentDir).group
		}
		k.addPCIDevice(d, parentDir)
		k.bootBind(d)
		for _, f := range m.functions {
			fa := addr
			fa.Function = f.fn
			fd := &pciDev{name: fa.String(), addr: fa, ids: f.ids, numa: g.NUMANode, resets: []string{"bus"},
				group: d.group, bootDriver: f.driver}
			k.addPCIDevice(fd, parentDir)
			k.bootBind(fd)
		}
	}
	if k.drvByName[DrvGIM] != nil && k.ngim == nil {
		k.gimInit(nil) // loaded at boot, after PCI enumeration
	}
	return k, nil
}

// devByPath is the PCI device whose directory is path.
func (k *Kernel) devByPath(path string) *pciDev {
	for _, d := range k.devs {
		if d.dir.path() == path {
			return d
		}
	}
	panic("simkernel: no PCI device at " + path)
}

// Host returns the description the kernel was built from.
func (k *Kernel) Host() Host { return k.host }

func (k *Kernel) buildSkeleton() {
	pciBus := k.mkdirAll("/sys/bus/pci")
	k.mkdir(pciBus, "devices")
	k.mkdir(pciBus, "drivers")
	k.mkdir(pciBus, "slots")
	k.attr(pciBus, "drivers_probe", nil, k.storeDriversProbe)
	k.attr(pciBus, "drivers_autoprobe", func() string { return boolDigit(k.busAutoprobe) }, func(s string) syscall.Errno {
		// bus_autoprobe_store looks at the first character only.
		k.busAutoprobe = s[0] != '0'
		return 0
	})
	k.attr(pciBus, "rescan", nil, k.storeBusRescan)
	k.attr(pciBus, "resource_alignment", func() string { return "\n" }, func(string) syscall.Errno { return 0 })

	mdevBus := k.mkdirAll("/sys/bus/mdev")
	k.mkdir(mdevBus, "devices")
	k.mkdir(mdevBus, "drivers")
	k.attr(mdevBus, "drivers_autoprobe", func() string { return "1\n" }, nil)
	k.mkdirAll("/sys/class/mdev_bus")
	k.mkdirAll(sysfs.IOMMUGroups)
	k.mkdirAll("/sys/devices/virtual")

	nodes := k.host.numaNodes()
	nodeDir := k.mkdirAll("/sys/devices/system/node")
	list := "0"
	if nodes > 1 {
		list = fmt.Sprintf("0-%d", nodes-1)
	}
	k.constAttr(nodeDir, "online", list+"\n")
	k.constAttr(nodeDir, "possible", list+"\n")
	for i := 0; i < nodes; i++ {
		k.mkdir(nodeDir, fmt.Sprintf("node%d", i))
	}

	k.mkdirAll(sysfs.Proc)
	vfio := k.mkdirAll(sysfs.VFIODev)
	ctl := k.newNode("vfio", kindDev, 0o666)
	k.attach(vfio, ctl)
}

func boolDigit(b bool) string {
	if b {
		return "1\n"
	}
	return "0\n"
}

// loadDrivers registers the PCI drivers a host with these models would
// have loaded, in registration order, plus the mdev bus drivers.
func (k *Kernel) loadDrivers() {
	want := map[string]bool{DrvPCIePort: true, DrvPCIStub: true, DrvVFIOPCI: !slices.Contains(k.host.Unloaded, DrvVFIOPCI)}
	for _, d := range k.host.Loaded {
		want[d] = true
	}
	if k.host.XeVFIO {
		want[DrvXeVFIO] = true
		k.mkdirAll(sysfs.Modules + "/xe_vfio_pci")
	}
	// /sys/module/<name> of the VFIO modules, with a parameter each, as a
	// loaded module (or a built-in one with parameters) shows.
	for mod, param := range map[string]string{"vfio_pci": "disable_idle_d3", "vfio_iommu_type1": "allow_unsafe_interrupts"} {
		if mod == "vfio_pci" && !want[DrvVFIOPCI] || slices.Contains(k.host.Unloaded, mod) {
			continue
		}
		k.constAttr(k.mkdirAll(sysfs.Modules+"/"+mod+"/parameters"), param, "N\n")
	}
	mdevDrv := map[string]bool{}
	for _, g := range k.host.GPUs {
		m, _ := lookupModel(g.Model)
		for _, mod := range m.modules {
			// a GIM GPU the host runs on another driver (amdgpu) means
			// a host without gim: it would take the GPU regardless.
			if mod == DrvGIM && g.Driver != "" && g.Driver != DrvGIM {
				continue
			}
			want[mod] = true
		}
		if g.Driver != "" && g.Driver != DriverNone {
			want[g.Driver] = true
		}
		for _, md := range []*mdevDef{m.pfMdev, m.vfMdev} {
			// NVIDIA's mdev driver is the vGPU host driver's.
			if md != nil && (md.driver != MdevDrvNVIDIA || k.host.nvVGPUHost()) {
				mdevDrv[md.driver] = true
			}
		}
	}
	for _, def := range driverOrder() {
		if !want[def.name] {
			continue
		}
		if def.name == DrvGIM && k.host.hostHasNewGIM() {
			// New GIM: its options, then its driver with libgv's ids.
			k.newGIMInit()
			def = newGIMDriverDef()
		}
		k.registerDriver(def)
	}
	if want[DrvXe] {
		k.addXeModule()
	}
	if want[DrvNVIDIA] {
		k.addNVIDIAModule()
	}
	k.addKernelRelease()
	names := make([]string, 0, len(mdevDrv))
	for n := range mdevDrv {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if n == MdevDrvGVTg && !k.host.KVMGT {
			continue // kvmgt registers it
		}
		k.registerMdevDriver(n)
	}
	if want[DrvI915] {
		k.addI915Module()
	}
	if k.host.KVMGT {
		k.kvmgt = true
		k.mkdirAll(sysfs.Modules + "/kvmgt")
	}
}

// loadXeVFIO loads module xe_vfio_pci at run time. k.mu is held.
func (k *Kernel) loadXeVFIO() {
	if k.drvByName[DrvXeVFIO] != nil {
		return
	}
	for _, def := range driverOrder() {
		if def.name == DrvXeVFIO {
			k.registerDriver(def)
		}
	}
	k.mkdirAll(sysfs.Modules + "/xe_vfio_pci")
}

func (k *Kernel) registerDriver(def driverDef) {
	drv := &pciDriver{def: def}
	drv.dir = k.mkdir(k.mustDir(sysfs.PCIDrivers), def.name)
	k.attr(drv.dir, "bind", nil, func(s string) syscall.Errno { return k.storeBind(drv, s) })
	k.attr(drv.dir, "unbind", nil, func(s string) syscall.Errno { return k.storeUnbind(drv, s) })
	k.attr(drv.dir, "new_id", nil, func(s string) syscall.Errno { return k.storeNewID(drv, s) })
	k.attr(drv.dir, "remove_id", nil, func(s string) syscall.Errno { return k.storeRemoveID(drv, s) })
	k.attr(drv.dir, "uevent", nil, func(string) syscall.Errno { return 0 })
	k.drivers = append(k.drivers, drv)
	k.drvByName[def.name] = drv
}

// unregisterDriver is pci_unregister_driver: the driver's directory goes
// (callers have unbound its devices).
func (k *Kernel) unregisterDriver(drv *pciDriver) {
	k.detachNode(drv.dir)
	k.drivers = slices.DeleteFunc(k.drivers, func(d *pciDriver) bool { return d == drv })
	delete(k.drvByName, drv.def.name)
}

func (k *Kernel) mustDir(p string) *node {
	n, errno := k.resolve(p, true)
	if errno != 0 || n.kind != kindDir {
		panic(fmt.Sprintf("simkernel: %s missing from the skeleton", p))
	}
	return n
}

// rootPortFor returns the directory a PF at addr lives in: the iGPU on bus 0
// sits on the host bridge; others behind a root port on the bus before
// theirs (pci0000:3a/0000:3a:00.0/0000:3b:00.0), created on first use.
func (k *Kernel) rootPortFor(addr pci.Address, numa int, occupied map[pci.Address]bool) string {
	if addr.Bus == 0 {
		return fmt.Sprintf("/sys/devices/pci%04x:00", addr.Domain)
	}
	rootBus := addr.Bus - 1
	bridge := fmt.Sprintf("/sys/devices/pci%04x:%02x", addr.Domain, rootBus)
	// Reuse the port already leading to this bus.
	for _, d := range k.devs {
		if d.bridge && strings.HasPrefix(d.dir.path(), bridge+"/") && d.addr.Bus == rootBus && d.secondaryBus == addr.Bus {
			return d.dir.path()
		}
	}
	for dev := uint8(0); dev < 32; dev++ {
		rp := pci.Address{Domain: addr.Domain, Bus: rootBus, Device: dev}
		if occupied[rp] || k.devs[rp.String()] != nil {
			continue
		}
		occupied[rp] = true
		d := &pciDev{name: rp.String(), addr: rp, ids: rootPortIDs(), bridge: true, secondaryBus: addr.Bus,
			numa: numa, resets: []string{"pm"}}
		k.addPCIDevice(d, bridge)
		k.bootBind(d)
		return d.dir.path()
	}
	return bridge
}

// allocGroup takes the lowest free IOMMU group number, as the kernel's IDA does.
func (k *Kernel) allocGroup() *iommuGroup {
	id := 0
	for k.groups[id] != nil {
		id++
	}
	g := &iommuGroup{id: id}
	base := k.mustDir(sysfs.IOMMUGroups)
	g.dir = k.mkdir(base, fmt.Sprint(id))
	g.devDir = k.mkdir(g.dir, "devices")
	k.constAttr(g.dir, "reserved_regions", "0x00000000fee00000 0x00000000feefffff msi\n")
	k.constAttr(g.dir, "type", "DMA-FQ\n")
	k.groups[id] = g
	return g
}

func (k *Kernel) freeGroup(g *iommuGroup) {
	if g == nil {
		return
	}
	if len(g.pcis) > 0 { // other functions still in it
		k.syncVFIO(g)
		return
	}
	k.syncVFIOGone(g)
	k.detachNode(g.dir)
	delete(k.groups, g.id)
}

// groupWantsVFIO reports whether the group's member is on a VFIO driver,
// which is what makes /dev/vfio/<group> exist.
func (g *iommuGroup) wantsVFIO() bool {
	if g.mdev != nil {
		return g.mdev.bound
	}
	for _, d := range g.pcis {
		switch {
		case d.driver == nil:
		case d.driver.def.vfio:
			return true
		// NVIDIA vGPU 17+: the VF is a VFIO device from its probe (nvvf.go).
		case d.driver.def.name == DrvNVIDIA && d.nv != nil:
			return true
		}
	}
	return false
}

// untypedNVVF: the group holds an NVIDIA VF without a vGPU type, whose
// VFIO device the driver will not open (nvvf.go).
func (g *iommuGroup) untypedNVVF() bool {
	if g == nil {
		return false
	}
	for _, d := range g.pcis {
		if d.driver != nil && d.driver.def.name == DrvNVIDIA && d.nv != nil && d.nv.current == 0 {
			return true
		}
	}
	return false
}

// inUse reports whether a VFIO user holds the group open.
func (g *iommuGroup) inUse() bool { return g != nil && g.vfio != nil && g.vfio.opens > 0 }

// syncVFIO makes /dev/vfio/<id> match the group's state. Callers have made
// sure nobody holds it open when it must go.
func (k *Kernel) syncVFIO(g *iommuGroup) {
	if g == nil {
		return // no IOMMU: no VFIO device
	}
	want := g.wantsVFIO()
	switch {
	case want && g.vfio == nil:
		dir := k.mustDir(sysfs.VFIODev)
		n := k.newNode(fmt.Sprint(g.id), kindDev, 0o600)
		n.group = g
		k.attach(dir, n)
		g.vfio = n
	case !want && g.vfio != nil:
		k.syncVFIOGone(g)
	}
}

func (k *Kernel) syncVFIOGone(g *iommuGroup) {
	if g.vfio != nil {
		k.detachNode(g.vfio)
		g.vfio = nil
	}
}

// waitFor blocks, with the lock released, until cond holds.
func (k *Kernel) waitFor(cond func() bool) {
	for !cond() {
		k.cond.Wait()
	}
}

// lockDev is the device_lock of a device: blocking operations on one device
// are serialised, as the kernel does.
func (k *Kernel) lockDev(d *pciDev) {
	k.waitFor(func() bool { return !d.busy })
	d.busy = true
}

func (k *Kernel) unlockDev(d *pciDev) {
	d.busy = false
	k.cond.Broadcast()
}
