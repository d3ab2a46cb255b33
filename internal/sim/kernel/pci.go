package simkernel

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// anyID is PCI_ANY_ID in new_id.
const anyID = 0xffffffff

// addPCIDevice creates the device directory under parentDir with the
// attributes the PCI core gives every function, its own IOMMU group and
// the /sys/bus/pci/devices link.
func (k *Kernel) addPCIDevice(d *pciDev, parentDir string) {
	d.parent = parentDir
	d.gone = false
	d.dir = k.mkdir(k.mkdirAll(parentDir), d.name)
	k.devs[d.name] = d
	dir := d.dir
	k.constAttr(dir, "vendor", fmt.Sprintf("0x%04x\n", d.ids.vendor))
	k.constAttr(dir, "device", fmt.Sprintf("0x%04x\n", d.ids.device))
	k.constAttr(dir, "subsystem_vendor", fmt.Sprintf("0x%04x\n", d.ids.subVendor))
	k.constAttr(dir, "subsystem_device", fmt.Sprintf("0x%04x\n", d.ids.subDevice))
	k.constAttr(dir, "class", fmt.Sprintf("0x%06x\n", d.ids.class))
	k.constAttr(dir, "revision", fmt.Sprintf("0x%02x\n", d.ids.revision))
	k.constAttr(dir, "modalias", d.modalias()+"\n")
	k.constAttr(dir, "irq", "0\n")
	k.constAttr(dir, "local_cpulist", k.cpulist(d.numa)+"\n")
	k.attr(dir, "numa_node", func() string { return fmt.Sprintf("%d\n", d.numa) }, func(s string) syscall.Errno {
		return k.storeNUMANode(d, s)
	})
	k.attr(dir, "uevent", func() string { return d.uevent() }, storeUevent)
	k.attr(dir, "driver_override", func() string {
		if d.override == "" {
			return "(null)\n"
		}
		return d.override + "\n"
	}, func(s string) syscall.Errno { return k.storeDriverOverride(d, s) })
	k.attr(dir, "enable", func() string { return boolDigit(d.enabled) }, func(s string) syscall.Errno {
		return k.storeEnable(d, s)
	})
	k.attr(dir, "reset_method", func() string {
		if len(d.resets) == 0 {
			return ""
		}
		return strings.Join(d.resets, " ") + "\n"
	}, func(s string) syscall.Errno { return k.storeResetMethod(d, s) })
	k.attr(dir, "reset", nil, func(s string) syscall.Errno { return k.storeReset(d, s) })
	k.attr(dir, "remove", nil, func(s string) syscall.Errno { return k.storeRemove(d, s) })
	k.attr(dir, "rescan", nil, k.storeBusRescan)
	k.link(dir, "subsystem", "/sys/bus/pci")

	if d.ids.class>>8 == pciClassVGA {
		k.constAttr(dir, "boot_vga", boolDigit(d.bootVGA))
	}
	// Without an IOMMU the kernel puts no function in a group.
	if d.group == nil && !k.host.NoIOMMU {
		d.group = k.allocGroup()
	}
	if d.group != nil {
		d.group.pcis = append(d.group.pcis, d)
		k.link(dir, "iommu_group", d.group.dir.path())
		k.link(d.group.devDir, d.name, dir.path())
	}
	k.link(k.mustDir(sysfs.PCIDevices), d.name, dir.path())

	if d.sriov != nil {
		k.addSRIOVAttrs(d)
	}
	if d.isVF() {
		k.link(dir, "physfn", d.pf.dir.path())
		k.attr(dir, "sriov_vf_msix_count", nil, func(s string) syscall.Errno { return k.storeVFMSIXCount(d, s) })
	}
}

func (d *pciDev) modalias() string {
	return fmt.Sprintf("pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X",
		d.ids.vendor, d.ids.device, d.ids.subVendor, d.ids.subDevice,
		d.ids.class>>16, (d.ids.class>>8)&0xff, d.ids.class&0xff)
}

func (d *pciDev) uevent() string {
	var b strings.Builder
	if d.driver != nil {
		fmt.Fprintf(&b, "DRIVER=%s\n", d.driver.def.name)
	}
	fmt.Fprintf(&b, "PCI_CLASS=%X\nPCI_ID=%04X:%04X\nPCI_SUBSYS_ID=%04X:%04X\nPCI_SLOT_NAME=%s\nMODALIAS=%s\n",
		d.ids.class, d.ids.vendor, d.ids.device, d.ids.subVendor, d.ids.subDevice, d.name, d.modalias())
	return b.String()
}

// cpulist gives each NUMA node 16 CPUs; -1 (no node) lists them all.
func (k *Kernel) cpulist(numa int) string {
	if numa < 0 {
		return fmt.Sprintf("0-%d", 16*k.host.numaNodes()-1)
	}
	return fmt.Sprintf("%d-%d", 16*numa, 16*numa+15)
}

// storeUevent accepts the kobject actions a write may synthesise.
func storeUevent(s string) syscall.Errno {
	action := strings.Fields(s)
	if len(action) == 0 {
		return syscall.EINVAL
	}
	switch action[0] {
	case "add", "remove", "change", "move", "online", "offline", "bind", "unbind":
		return 0
	}
	return syscall.EINVAL
}

func (k *Kernel) storeNUMANode(d *pciDev, s string) syscall.Errno {
	neg := strings.HasPrefix(s, "-")
	v, e := kstrtoul(strings.TrimPrefix(s, "-"), 31)
	if e != 0 {
		return e
	}
	n := int(v)
	if neg {
		n = -n
	}
	if n < -1 || n >= k.host.numaNodes() {
		return syscall.EINVAL
	}
	d.numa = n
	return 0
}

// storeDriverOverride is driver_set_override: the value up to the first
// newline; an empty value ("\n") clears it.
func (k *Kernel) storeDriverOverride(d *pciDev, s string) syscall.Errno {
	if len(s) >= 4096-1 {
		return syscall.EINVAL
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	d.override = s
	return 0
}

func (k *Kernel) storeEnable(d *pciDev, s string) syscall.Errno {
	v, e := kstrtoul(s, 64)
	if e != 0 {
		return e
	}
	switch {
	case d.driver != nil:
		return syscall.EBUSY
	case v != 0:
		d.enabled = true
	case d.enabled:
		d.enabled = false
	default:
		return syscall.EIO
	}
	return 0
}

func (k *Kernel) defaultResets(d *pciDev) []string {
	switch {
	case d.bridge:
		return []string{"pm"}
	case d.isVF():
		return []string{"flr"}
	case d.model != nil:
		return d.model.resets
	}
	return nil
}

func (k *Kernel) storeResetMethod(d *pciDev, s string) syscall.Errno {
	if streq(s, "") {
		d.resets = nil
		return 0
	}
	if streq(s, "default") {
		d.resets = append([]string(nil), k.defaultResets(d)...)
		return 0
	}
	supported := k.defaultResets(d)
	var out []string
	for _, name := range strings.Split(strings.TrimSuffix(s, "\n"), " ") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !contains(supported, name) {
			return syscall.EINVAL
		}
		out = append(out, name)
	}
	d.resets = out
	return 0
}

func (k *Kernel) storeReset(d *pciDev, s string) syscall.Errno {
	v, e := kstrtoul(s, 64)
	if e != 0 {
		return e
	}
	if v != 1 {
		return syscall.EINVAL
	}
	if len(d.resets) == 0 {
		return syscall.ENOTTY
	}
	if contains(d.resets, "flr") {
		k.xeFLR(d)
	}
	return 0
}

func (k *Kernel) storeVFMSIXCount(d *pciDev, s string) syscall.Errno {
	if strings.HasPrefix(s, "-") {
		if _, e := kstrtoul(s[1:], 31); e != 0 {
			return e
		}
		return syscall.EINVAL
	}
	if _, e := kstrtoul(s, 31); e != 0 {
		return e
	}
	if d.driver != nil {
		return syscall.EBUSY
	}
	// No GPU PF driver implements sriov_set_msix_vec_count.
	return syscall.EOPNOTSUPP
}

// device finds a PCI device by its exact sysfs name, as
// bus_find_device_by_name does ("03:00.0" does not match).
func (k *Kernel) device(s string) *pciDev {
	d := k.devs[strings.TrimSuffix(s, "\n")]
	if d == nil || d.gone {
		return nil
	}
	return d
}

// matches is pci_match_device: driver_override decides alone when set;
// otherwise dynamic ids, then the static table.
func (drv *pciDriver) matches(d *pciDev) bool {
	if d.override != "" {
		return d.override == drv.def.name
	}
	for _, id := range drv.dynIDs {
		if id.matches(d) {
			return true
		}
	}
	for _, id := range drv.def.ids {
		if id.matches(d) && !drv.def.overrideOnly {
			return true
		}
	}
	return drv.def.classMask != 0 && d.ids.class&drv.def.classMask == drv.def.class
}

func (id pciID) matches(d *pciDev) bool {
	return (id.vendor == anyID || id.vendor == uint32(d.ids.vendor)) &&
		(id.device == anyID || id.device == uint32(d.ids.device))
}

// canProbe is pci_device_can_probe: a VF is probed only when its PF allows
// autoprobe, or when driver_override names the driver.
func canProbe(drv *pciDriver, d *pciDev) bool {
	return !d.isVF() || d.pf.sriov.autoprobe || d.override == drv.def.name
}

// driverProbe is the driver's probe(): 0 when it takes the device.
func (k *Kernel) driverProbe(drv *pciDriver, d *pciDev) (errno syscall.Errno) {
	if !canProbe(drv, d) {
		return syscall.ENODEV
	}
	defer func() { k.probes = append(k.probes, Probe{Device: d.name, Driver: drv.def.name, Errno: errno}) }()
	if drv.def.vfio && d.sriov != nil && d.sriov.num > 0 {
		return syscall.EBUSY // vfio_pci_core: "Cannot bind to PF with SR-IOV enabled"
	}
	if drv.def.vfio && d.group == nil {
		return syscall.EINVAL // vfio_device_set_group: no IOMMU group, no VFIO (noiommu mode aside)
	}
	switch drv.def.name {
	case DrvNVIDIA:
		// nv-pci.c nv_pci_probe: a build other than the vGPU host
		// driver's "Ignoring probe for VF"; the vGPU host driver's
		// "Aborting probe for VF ... since IOMMU is not present". Both
		// return -1.
		if d.isVF() && (!k.host.nvVGPUHost() || d.group == nil) {
			return syscall.EPERM
		}
	case DrvVFIOPCI:
		if d.bridge {
			return syscall.EINVAL // vfio-pci takes normal headers only
		}
		if d.isVF() && d.pf.model != nil && d.pf.model.vfNV != nil {
			return syscall.EINVAL // NVIDIA vGPU 17+ VFs stay on nvidia
		}
	case DrvXeVFIO:
		// xe_vfio_pci_vf_init: a VF needs its PF driven by xe as a PF
		// (xe_sriov_vfio_get_pf), else -ENODEV; a PF is plain VFIO.
		if d.isVF() && (d.pf.driver == nil || d.pf.driver.def.name != DrvXe || !k.xePFMode()) {
			return syscall.ENODEV
		}
	case DrvNVMe:
		if d.isVF() {
			return syscall.ENODEV // the VF controller is offline until the PF assigns it resources
		}
	case DrvPCIePort:
		if !d.bridge {
			return syscall.ENODEV
		}
	}
	return 0
}

// probe is device_attach: the first driver, in registration order, that
// matches and whose probe succeeds takes the device; probe errors are
// ignored so that the next driver can try.
func (k *Kernel) probe(d *pciDev) {
	if d.driver != nil || d.gone {
		return
	}
	for _, drv := range k.drivers {
		if drv.matches(d) && k.driverProbe(drv, d) == 0 {
			k.bindDriver(d, drv)
			return
		}
	}
}

// bootBind binds a device the way the host came up: its boot driver,
// without probing rules (modules loaded with ids=, driverctl overrides).
func (k *Kernel) bootBind(d *pciDev) {
	name := d.bootDriver
	switch {
	case name == DriverNone:
		return
	case name == "" && d.bridge:
		name = DrvPCIePort
	case name == "" && d.model != nil:
		name = d.model.driver
	}
	if name == DrvGIM && k.ngim == nil {
		return // old gim binds nothing: it finds its GPUs itself (gimInit)
	}
	if drv := k.drvByName[name]; drv != nil && k.driverProbe(drv, d) == 0 {
		k.bindDriver(d, drv)
	}
}

// bindDriver attaches d to drv and runs the driver's side effects: mdev
// parents for NVIDIA/i915, the nvidia/ directory on per-VF-type VFs,
// /dev/vfio for VFIO drivers.
func (k *Kernel) bindDriver(d *pciDev, drv *pciDriver) {
	d.driver = drv
	k.link(d.dir, "driver", drv.dir.path())
	k.link(drv.dir, d.name, d.dir.path())
	if !drv.def.vfio && drv.def.name != DrvPCIStub {
		d.enabled = true // vfio-pci enables the device only when a user opens it
	}
	switch drv.def.name {
	case DrvNVIDIA:
		if !d.isVF() {
			k.addNVProc(d)
		}
		switch {
		case !k.host.nvVGPUHost():
			// no vGPU Manager: no mdev types, no per-VF types
		case !d.isVF() && d.model != nil && d.model.pfMdev != nil:
			k.registerParent(d.name, d.dir, d.model.pfMdev, newPool(d.model.pfMdev.capacity, d.model.pfMdev.mix), d)
		case d.isVF() && d.pf.model.vfMdev != nil:
			k.registerParent(d.name, d.dir, d.pf.model.vfMdev, d.pf.sriov.mdevPool, d)
		case d.isVF() && d.pf.model.vfNV != nil:
			k.addNVDir(d)
		}
	case DrvXe:
		if !d.isVF() && d.sriov != nil {
			if k.xePFMode() {
				d.sriov.driverCap = k.xeTotalVFs(d)
			}
			k.addXeAdmin(d)
		}
	case DrvGIM:
		if isNewGIMModel(d.model) && !d.isVF() {
			k.newGIMProbe(d)
		}
	case DrvAMDGPU:
		if !d.isVF() && d.model != nil && d.model.vramMB > 0 {
			k.constAttr(d.dir, "mem_info_vram_total", fmt.Sprintf("%d\n", uint64(d.model.vramMB)<<20))
		}
	case DrvI915:
		k.gvtInitDevice(d)
	}
	k.syncVFIO(d.group)
}

// unbindDriver is the driver's remove(). Callers have waited until nothing
// below d is in use. Vendor drivers disable SR-IOV in remove(), except
// those that leave it (nvme).
func (k *Kernel) unbindDriver(d *pciDev) {
	drv := d.driver
	if drv == nil {
		return
	}
	if d.sriov != nil && d.sriov.num > 0 && !drv.def.keepsVFs {
		k.disableVFs(d)
	}
	if d.mdev != nil {
		k.unregisterParent(d.mdev)
	}
	if d.nv != nil {
		k.removeNVDir(d)
	}
	k.removeXeAdmin(d)
	if drv.def.name == DrvGIM {
		k.newGIMRemove(d)
	}
	if d.sriov != nil {
		d.sriov.driverCap = 0
	}
	if drv.def.name == DrvNVIDIA {
		k.removeNVProc(d)
		if !d.isVF() {
			k.migRebind(d)
		}
	}
	k.detachNode(d.dir.children["mem_info_vram_total"])
	d.driver = nil
	k.detachNode(d.dir.children["driver"])
	k.detachNode(drv.dir.children[d.name])
	d.enabled = false
	k.syncVFIO(d.group)
}

// inUse reports whether a VFIO user holds d, its mdevs or its VFs.
func (k *Kernel) inUse(d *pciDev) bool {
	if d.group.inUse() {
		return true
	}
	if d.mdev != nil {
		for _, m := range d.mdev.instances {
			if m.group.inUse() || m.busy {
				return true
			}
		}
	}
	if d.sriov != nil {
		for _, vf := range d.sriov.vfs {
			if !vf.gone && (vf.busy || k.inUse(vf)) {
				return true
			}
		}
	}
	return false
}

// detachBlocking unbinds d's driver once no VFIO user holds anything below
// it; the real driver's remove() waits the same way. d must be locked.
func (k *Kernel) detachBlocking(d *pciDev) {
	k.waitFor(func() bool {
		if d.gone {
			return true
		}
		if d.driver != nil && d.driver.def.keepsVFs && !d.group.inUse() && d.mdev == nil {
			return true // the VFs stay: their users do not matter
		}
		return !k.inUse(d)
	})
	if !d.gone {
		k.unbindDriver(d)
	}
}

func (k *Kernel) storeBind(drv *pciDriver, s string) syscall.Errno {
	d := k.device(s)
	if d == nil || !drv.matches(d) {
		return syscall.ENODEV
	}
	k.lockDev(d)
	defer k.unlockDev(d)
	if d.gone {
		return syscall.ENODEV
	}
	if d.driver != nil {
		return syscall.EBUSY
	}
	if e := k.driverProbe(drv, d); e != 0 {
		return e
	}
	k.bindDriver(d, drv)
	return 0
}

func (k *Kernel) storeUnbind(drv *pciDriver, s string) syscall.Errno {
	d := k.device(s)
	if d == nil || d.driver != drv {
		return syscall.ENODEV
	}
	k.lockDev(d)
	defer k.unlockDev(d)
	if d.driver != drv {
		return syscall.ENODEV
	}
	k.detachBlocking(d)
	return 0
}

func (k *Kernel) storeDriversProbe(s string) syscall.Errno {
	d := k.device(s)
	if d == nil {
		return syscall.ENODEV
	}
	k.lockDev(d)
	defer k.unlockDev(d)
	k.probe(d)
	return 0
}

// parseIDs reads "vendor device [...]" as new_id's sscanf("%x %x ...").
func parseIDs(s string) (vendor, device uint32, n int) {
	f := strings.Fields(s)
	vals := make([]uint32, 0, 2)
	for _, x := range f {
		v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(x, "0x"), "0X"), 16, 32)
		if err != nil {
			break
		}
		vals = append(vals, uint32(v))
	}
	if len(vals) < 2 {
		return 0, 0, len(vals)
	}
	return vals[0], vals[1], len(vals)
}

func (k *Kernel) storeNewID(drv *pciDriver, s string) syscall.Errno {
	vendor, device, n := parseIDs(s)
	if n < 2 {
		return syscall.EINVAL
	}
	id := pciID{vendor: vendor, device: device}
	for _, st := range drv.def.ids {
		if st == id {
			return syscall.EEXIST
		}
	}
	drv.dynIDs = append(drv.dynIDs, id)
	if k.busAutoprobe {
		for _, d := range k.sortedDevs() {
			if d.driver == nil && !d.busy && drv.matches(d) && k.driverProbe(drv, d) == 0 {
				k.bindDriver(d, drv)
			}
		}
	}
	return 0
}

func (k *Kernel) storeRemoveID(drv *pciDriver, s string) syscall.Errno {
	vendor, device, n := parseIDs(s)
	if n < 2 {
		return syscall.EINVAL
	}
	for i, id := range drv.dynIDs {
		if id.vendor == vendor && id.device == device {
			drv.dynIDs = append(drv.dynIDs[:i], drv.dynIDs[i+1:]...)
			return 0
		}
	}
	return syscall.ENODEV
}

func (k *Kernel) sortedDevs() []*pciDev {
	out := make([]*pciDev, 0, len(k.devs))
	for _, d := range k.devs {
		if !d.gone {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr.Less(out[j].addr) })
	return out
}

// storeRemove hot-removes the device and everything below it
// (pci_stop_and_remove_bus_device), waiting for VFIO users as unbind does.
func (k *Kernel) storeRemove(d *pciDev, s string) syscall.Errno {
	v, e := kstrtoul(s, 64)
	if e != 0 {
		return e
	}
	if v == 0 {
		return 0
	}
	k.lockDev(d)
	defer k.unlockDev(d)
	if d.gone {
		return 0
	}
	below := k.devicesBelow(d)
	k.waitFor(func() bool {
		for _, c := range below {
			if !c.gone && (k.inUse(c) || (c != d && c.busy)) {
				return false
			}
		}
		return true
	})
	// Children first, then d, as the PCI core walks the bus.
	for i := len(below) - 1; i >= 0; i-- {
		k.removeDevice(below[i])
	}
	return 0
}

// devicesBelow lists d and the devices whose directories sit inside d's,
// parents first.
func (k *Kernel) devicesBelow(d *pciDev) []*pciDev {
	prefix := d.dir.path() + "/"
	out := []*pciDev{d}
	for _, c := range k.sortedDevs() {
		if c != d && !c.isVF() && strings.HasPrefix(c.dir.path(), prefix) {
			out = append(out, c)
		}
	}
	return out
}

// removeDevice takes a device out of the tree. Nothing below it is in use.
func (k *Kernel) removeDevice(d *pciDev) {
	if d.gone {
		return
	}
	k.unbindDriver(d)
	if d.sriov != nil && d.sriov.num > 0 {
		k.disableVFs(d)
	}
	k.detachNode(k.mustDir(sysfs.PCIDevices).children[d.name])
	if d.group != nil {
		k.detachNode(d.group.devDir.children[d.name])
		d.group.pcis = slices.DeleteFunc(d.group.pcis, func(m *pciDev) bool { return m == d })
		k.freeGroup(d.group)
	}
	d.oldGroup, d.group = d.group, nil
	k.detachNode(d.dir)
	delete(k.devs, d.name)
	d.gone = true
	if d.isVF() {
		k.detachNode(d.pf.dir.children[fmt.Sprintf("virtfn%d", d.vfIndex)])
		return
	}
	d.override = ""
	k.removed = append(k.removed, d)
}

// storeBusRescan brings back hot-removed devices (not VFs) and probes them.
func (k *Kernel) storeBusRescan(s string) syscall.Errno {
	v, e := kstrtoul(s, 64)
	if e != 0 {
		return e
	}
	if v == 0 || len(k.removed) == 0 {
		return 0
	}
	back := k.removed
	k.removed = nil
	// Bridges before the devices behind them.
	sort.SliceStable(back, func(i, j int) bool { return back[i].bridge && !back[j].bridge })
	// A device joins the group it shared with functions still present, or
	// with those re-added before it (pci_device_group finds the alias).
	regroup := map[*iommuGroup]*iommuGroup{}
	for _, d := range back {
		old := d.oldGroup
		switch {
		case old != nil && k.groups[old.id] == old:
			d.group = old
		case old != nil:
			d.group = regroup[old]
		}
		k.addPCIDevice(d, d.parent)
		if old != nil && regroup[old] == nil && k.groups[old.id] != old {
			regroup[old] = d.group
		}
		d.oldGroup = nil
	}
	if k.busAutoprobe {
		for _, d := range back {
			k.probe(d)
		}
	}
	return 0
}

// Probe is one call of a driver's probe() on a device: what the kernel log
// shows ("igbvf 0000:01:10.0: ..."), taken or refused.
type Probe struct {
	Device, Driver string
	Errno          syscall.Errno // 0: the driver took the device
}

// ProbeLog lists every driver probe since the kernel was made, in order.
func (k *Kernel) ProbeLog() []Probe {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]Probe(nil), k.probes...)
}
