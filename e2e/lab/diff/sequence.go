package diff

// The lab's devices, as sysfs paths.
const (
	IGBAddr  = "0000:01:00.0"
	NVMeAddr = "0000:02:00.0"

	devs    = "/sys/bus/pci/devices/"
	drivers = "/sys/bus/pci/drivers/"
	igb     = devs + IGBAddr
	nvme    = devs + NVMeAddr
	// igb VFs: offset 128, stride 2 from 01:00.0.
	igbVF0Addr = "0000:01:10.0"
	igbVF1Addr = "0000:01:10.2"
	igbVF2Addr = "0000:01:10.4"
	igbVF0     = devs + igbVF0Addr
	igbVF1     = devs + igbVF1Addr
	igbVF2     = devs + igbVF2Addr
	nvmeVF0    = devs + "0000:02:00.1"
	nvmeVF1    = devs + "0000:02:00.2"

	mdevBus  = "/sys/class/mdev_bus/"
	mdevDevs = "/sys/bus/mdev/devices/"
	mbochs   = mdevBus + "mbochs/mdev_supported_types/"
	mtty     = mdevBus + "mtty/mdev_supported_types/"

	// UUIDs the sequence creates.
	uuidA = "6a1c4b2e-0f4d-4a57-9a55-1b2d3c4e5f01"
	uuidB = "6a1c4b2e-0f4d-4a57-9a55-1b2d3c4e5f02"
	uuidC = "6a1c4b2e-0f4d-4a57-9a55-1b2d3c4e5f03"
	uuidD = "6a1c4b2e-0f4d-4a57-9a55-1b2d3c4e5f04"
	uuidE = "6a1c4b2e-0f4d-4a57-9a55-1b2d3c4e5f05"
	uuidF = "6a1c4b2e-0f4d-4a57-9a55-1b2d3c4e5f06"
)

func read(p, why string) Step           { return Step{Op: Read, Path: p, Why: why} }
func write(p, data, why string) Step    { return Step{Op: Write, Path: p, Data: data, Why: why} }
func link(p, why string) Step           { return Step{Op: Link, Path: p, Why: why} }
func exists(p, why string) Step         { return Step{Op: Exists, Path: p, Why: why} }
func list(p, prefix, why string) Step   { return Step{Op: List, Path: p, Data: prefix, Why: why} }
func group(p, why string) Step          { return Step{Op: Group, Path: p, Why: why} }
func open(p, why string) Step           { return Step{Op: Open, Path: p, Why: why} }
func closeDev(p, why string) Step       { return Step{Op: Close, Path: p, Why: why} }
func start(p, data, why string) Step    { return Step{Op: Start, Path: p, Data: data, Why: why} }
func pending(why string) Step           { return Step{Op: Pending, Why: why} }
func wait(why string) Step              { return Step{Op: Wait, Why: why} }
func settle(p, driver, why string) Step { return Step{Op: Settle, Path: p, Data: driver, Why: why} }

// pciIdentity reads what identifies a PCI function and its state.
func pciIdentity(dev, why string) []Step {
	return []Step{
		read(dev+"/vendor", why), read(dev+"/device", why), read(dev+"/class", why),
		read(dev+"/subsystem_vendor", why), read(dev+"/subsystem_device", why), read(dev+"/revision", why),
		read(dev+"/driver_override", why), read(dev+"/reset_method", why), link(dev+"/driver", why),
		group(dev, why), read(dev+"/modalias", why), read(dev+"/uevent", why), read(dev+"/enable", why),
	}
}

func sriovAttrs(pf, why string) []Step {
	return []Step{
		read(pf+"/sriov_totalvfs", why), read(pf+"/sriov_numvfs", why), read(pf+"/sriov_offset", why),
		read(pf+"/sriov_stride", why), read(pf+"/sriov_vf_device", why), read(pf+"/sriov_drivers_autoprobe", why),
		list(pf, "virtfn", why),
	}
}

func mdevCounts(why string) []Step {
	return []Step{
		read(mbochs+"mbochs-small/available_instances", why),
		read(mbochs+"mbochs-medium/available_instances", why),
		read(mbochs+"mbochs-large/available_instances", why),
		read(mtty+"mtty-1/available_instances", why),
		read(mtty+"mtty-2/available_instances", why),
	}
}

func cat(parts ...[]Step) []Step {
	var out []Step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Sequence is the scripted run. Every reaction internal/sim/kernel/doc.go
// claims that this lab's hardware can show is exercised; docs/lab.md lists
// them and the ones it cannot (NVIDIA, GIM, GVT-g specifics).
func Sequence() []Step {
	const (
		boot    = "boot state: ids, drivers, groups"
		numvfs  = "sriov_numvfs checks in the kernel's order"
		vfs     = "VF addresses: RID + offset + n*stride; VF attributes"
		bind    = "driver_override + drivers_probe binds; /dev/vfio/<group> appears"
		blocks  = "removing a VFIO device blocks while its group is open"
		noauto  = "sriov_drivers_autoprobe=0: only the override's driver may bind a VF"
		pfrm    = "a vendor PF driver's remove() disables SR-IOV"
		nvmevf  = "nvme fails on QEMU's VFs: they end unbound"
		pfstub  = "pci-pf-stub: no ids, sriov_configure_simple, no remove()"
		create  = "mdev create: EINVAL, EEXIST, ENOSPC; shared available_instances"
		remove  = "mdev remove: EINVAL unless a number, 0 does nothing"
		vfiopf  = "vfio-pci refuses a PF with VFs enabled (EBUSY)"
		names   = "bind names must be the exact sysfs name"
		noSRIOV = "ENOENT without a driver or one lacking sriov_configure"
	)
	return cat(
		// --- boot state
		pciIdentity(igb, boot), sriovAttrs(igb, boot),
		pciIdentity(nvme, boot), sriovAttrs(nvme, boot),
		[]Step{
			exists("/dev/vfio/vfio", "VFIO: /dev/vfio/vfio always"),
			exists("/sys/class/mdev_bus/mbochs", boot),
			exists("/sys/class/mdev_bus/mtty", boot),
			list(mbochs, "", "mdev type dirs <driver>-<sysfs name>"),
			read(mbochs+"mbochs-large/name", "name: the driver's pretty name"),
			read(mbochs+"mbochs-large/description", "description where the driver has one"),
			read(mbochs+"mbochs-large/device_api", boot),
			list(mtty, "", "mdev type dirs <driver>-<sysfs name>"),
			read(mtty+"mtty-1/name", "name: the driver's pretty name"),
			read(mtty+"mtty-2/name", "name: the driver's pretty name"),
			exists(mtty+"mtty-1/description", "no description when the driver has none"),
			read(mtty+"mtty-1/device_api", boot),
		},
		mdevCounts(boot),

		// --- sriov_numvfs, in the kernel's order of checks
		[]Step{
			write(igb+"/sriov_numvfs", "abc", numvfs),
			write(igb+"/sriov_numvfs", "-1", numvfs),
			write(igb+"/sriov_numvfs", "65536", numvfs),
			write(igb+"/sriov_numvfs", "8", numvfs),
			write(igb+"/sriov_numvfs", "0", numvfs),
			write(igb+"/sriov_numvfs", "", "an empty write reaches no store method"),
			write(igb+"/sriov_numvfs", "3", numvfs),
			read(igb+"/sriov_numvfs", numvfs),
			write(igb+"/sriov_numvfs", "3", "the current value again: no change"),
			write(igb+"/sriov_numvfs", "2", "N->M: EBUSY"),
			write(igb+"/sriov_numvfs", "0x3", "kstrtou16 base 0"),
			read(igb+"/sriov_numvfs", numvfs),
		},
		sriovAttrs(igb, vfs),
		pciIdentity(igbVF0, vfs), pciIdentity(igbVF2, vfs),
		[]Step{
			link(igbVF0+"/physfn", vfs),
			exists(igbVF0+"/sriov_vf_msix_count", vfs),
			exists(igbVF0+"/sriov_numvfs", "a VF has no SR-IOV capability"),
		},

		// --- binding a VF to vfio-pci, and the VFIO group
		[]Step{
			write(igbVF0+"/driver_override", "vfio-pci", bind),
			read(igbVF0+"/driver_override", bind),
			link(igbVF0+"/driver", "the override does not move a bound device"),
			write(drivers+"vfio-pci/bind", igbVF0Addr, "bind to another driver while bound: EBUSY"),
			write(drivers+"igbvf/unbind", igbVF0Addr, bind),
			link(igbVF0+"/driver", bind),
			group(igbVF0, "no /dev/vfio node while unbound"),
			write(drivers+"igbvf/bind", igbVF0Addr, "driver_override decides alone when set: ENODEV"),
			write("/sys/bus/pci/drivers_probe", igbVF0Addr, bind),
			link(igbVF0+"/driver", bind),
			group(igbVF0, bind),
			read(igbVF0+"/enable", "vfio-pci enables a device only while a user has it"),
			write("/sys/bus/pci/drivers_probe", igbVF0Addr, "drivers_probe on a bound device"),
			write(drivers+"vfio-pci/bind", "01:10.0", names),
			write(drivers+"vfio-pci/bind", "0000:01:10.0\n", "bind on a bound device: EBUSY"),
			write(igbVF0+"/driver_override", "", "an empty write does not clear driver_override"),
			read(igbVF0+"/driver_override", "an empty write does not clear driver_override"),
			open(igbVF0, "a group admits one opener"),
			read(igbVF0+"/enable", "vfio-pci enables a device only while a user has it"),
			open(devs+"./"+igbVF0Addr, "a group admits one opener: the second EBUSY"),
			start(drivers+"vfio-pci/unbind", igbVF0Addr, blocks),
			pending(blocks),
			closeDev(igbVF0, blocks),
			wait(blocks),
			link(igbVF0+"/driver", blocks),
			group(igbVF0, blocks),
			write("/sys/bus/pci/drivers_probe", igbVF0Addr, bind),
			link(igbVF0+"/driver", bind),
			open(igbVF0, blocks),
			start(igb+"/sriov_numvfs", "0", blocks),
			pending(blocks),
			pending("still blocked: longer than disabling VFs takes"),
			closeDev(igbVF0, blocks),
			wait(blocks),
			read(igb+"/sriov_numvfs", blocks),
			list(igb, "virtfn", blocks),
			exists(igbVF0, "disabling VFs removes them"),
		},

		// --- autoprobe off
		[]Step{
			write(igb+"/sriov_drivers_autoprobe", "0", noauto),
			write(igb+"/sriov_drivers_autoprobe", "maybe", "kstrtobool: EINVAL"),
			read(igb+"/sriov_drivers_autoprobe", noauto),
			write(igb+"/sriov_numvfs", "2", noauto),
			link(igbVF0+"/driver", "VFs stay unbound with autoprobe 0"),
			link(igbVF1+"/driver", "VFs stay unbound with autoprobe 0"),
			write(drivers+"igbvf/bind", igbVF0Addr, noauto),
			write(drivers+"vfio-pci/new_id", "8086 10ca", "new_id + bind with autoprobe 0"),
			link(igbVF0+"/driver", "new_id does not bind VFs with autoprobe 0"),
			write(drivers+"vfio-pci/bind", igbVF0Addr, "new_id + bind with autoprobe 0 fails ENODEV"),
			write(drivers+"vfio-pci/remove_id", "8086 10ca", noauto),
			write(drivers+"vfio-pci/remove_id", "8086 10ca", "remove_id of an id not there: ENODEV"),
			write(igbVF1+"/driver_override", "vfio-pci", noauto),
			write("/sys/bus/pci/drivers_probe", igbVF1Addr, noauto),
			link(igbVF1+"/driver", noauto),
			group(igbVF1, noauto),
			write(drivers+"vfio-pci/unbind", igbVF1Addr, noauto),
			write(igbVF1+"/driver_override", "\n", "\"\\n\" clears driver_override"),
			read(igbVF1+"/driver_override", "\"\\n\" clears driver_override"),
			write(igb+"/sriov_drivers_autoprobe", "1", noauto),
			write(igb+"/sriov_numvfs", "0", noauto),
			write(igb+"/sriov_numvfs", "1", "autoprobe 1: igbvf takes the VF"),
			settle(igbVF0, "igbvf", "autoprobe 1: igbvf takes the VF"),
		},

		// --- the PF's own driver goes away
		[]Step{
			write(igb+"/driver_override", "vfio-pci", vfiopf),
			write(drivers+"igb/unbind", IGBAddr, pfrm),
			link(igb+"/driver", pfrm),
			read(igb+"/sriov_numvfs", pfrm),
			list(igb, "virtfn", pfrm),
			read(igb+"/sriov_totalvfs", "sriov_totalvfs without the driver that limited it"),
			write(igb+"/sriov_numvfs", "2", noSRIOV),
			write("/sys/bus/pci/drivers_probe", IGBAddr, "a PF on vfio-pci"),
			link(igb+"/driver", "a PF on vfio-pci"),
			group(igb, "a PF on vfio-pci"),
			write(igb+"/sriov_numvfs", "2", "vfio-pci without enable_sriov: ENOENT"),
			write(drivers+"vfio-pci/unbind", IGBAddr, "a PF on vfio-pci"),
			write(igb+"/driver_override", "\n", "\"\\n\" clears driver_override"),
			write(drivers+"igb/bind", IGBAddr, "bind by name"),
			link(igb+"/driver", "bind by name"),
			read(igb+"/sriov_totalvfs", "igb limits its VFs to 7"),
		},

		// --- nvme: VFs the driver fails on; a PF with VFs on vfio-pci
		[]Step{
			write(nvme+"/sriov_numvfs", "2", nvmevf),
			settle(nvmeVF0, "", nvmevf),
			settle(nvmeVF1, "", nvmevf),
			pciIdentity(nvmeVF0, nvmevf)[0],
			read(nvmeVF0+"/class", nvmevf),
			read(nvmeVF0+"/reset_method", nvmevf),
			group(nvmeVF0, nvmevf),
			write(nvmeVF0+"/driver_override", "vfio-pci", bind),
			write("/sys/bus/pci/drivers_probe", "0000:02:00.1", bind),
			link(nvmeVF0+"/driver", bind),
			group(nvmeVF0, bind),
			write(drivers+"nvme/unbind", NVMeAddr, pfrm),
			link(nvme+"/driver", pfrm),
			read(nvme+"/sriov_numvfs", pfrm),
			list(nvme, "virtfn", pfrm),
			write(nvme+"/driver_override", "vfio-pci", vfiopf),
			write("/sys/bus/pci/drivers_probe", NVMeAddr, vfiopf),
			link(nvme+"/driver", vfiopf),
			write(nvme+"/driver_override", "\n", vfiopf),
			write("/sys/bus/pci/drivers_probe", NVMeAddr, "the PF back on nvme"),
			settle(nvme, "nvme", "the PF back on nvme"),
			read(nvme+"/sriov_numvfs", "nvme's remove() leaves SR-IOV enabled"),
			write(nvme+"/sriov_numvfs", "0", "the VF on vfio-pci, not held, goes"),
			list(nvme, "virtfn", numvfs),
		},

		// --- pci-pf-stub, the way NVIDIA's sriov-manage enables a GPU's VFs
		[]Step{
			write(drivers+"nvme/unbind", NVMeAddr, pfstub),
			write(drivers+"pci-pf-stub/new_id", "1b36 0010", "new_id binds the unbound PF"),
			link(nvme+"/driver", "new_id binds the unbound PF"),
			write(drivers+"pci-pf-stub/bind", NVMeAddr, "bind on a bound device EBUSY"),
			write(drivers+"pci-pf-stub/remove_id", "1b36 0010", "remove_id leaves the bound PF bound"),
			link(nvme+"/driver", "remove_id leaves the bound PF bound"),
			write(nvme+"/sriov_numvfs", "2", "pci-pf-stub's sriov_configure enables VFs"),
			settle(nvmeVF0, "", nvmevf),
			settle(nvmeVF1, "", nvmevf),
			list(nvme, "virtfn", "pci-pf-stub's sriov_configure enables VFs"),
			write(nvme+"/sriov_numvfs", "1", "EBUSY on N->M"),
			write(drivers+"pci-pf-stub/unbind", NVMeAddr, "pci-pf-stub has no remove(): the VFs stay"),
			link(nvme+"/driver", "pci-pf-stub has no remove(): the VFs stay"),
			read(nvme+"/sriov_numvfs", "pci-pf-stub has no remove(): the VFs stay"),
			list(nvme, "virtfn", "pci-pf-stub has no remove(): the VFs stay"),
			write(drivers+"pci-pf-stub/remove_id", "1b36 0010", "remove_id of an absent id ENODEV"),
			write(drivers+"nvme/bind", NVMeAddr, "the PF back on nvme, with its VFs"),
			settle(nvme, "nvme", "the PF back on nvme, with its VFs"),
			read(nvme+"/sriov_numvfs", "the PF back on nvme, with its VFs"),
			write(nvme+"/sriov_numvfs", "0", numvfs),
			list(nvme, "virtfn", numvfs),
		},

		// --- mdev: create, shared counters, errors, remove
		[]Step{
			write(mbochs+"mbochs-large/create", uuidA, create),
		},
		mdevCounts(create),
		[]Step{
			write(mbochs+"mbochs-medium/create", uuidA, "EEXIST: the UUID is in use on any parent"),
			write(mtty+"mtty-1/create", uuidA, "EEXIST: the UUID is in use on any parent"),
			write(mbochs+"mbochs-medium/create", "not-a-uuid", "EINVAL unless a UUID"),
			write(mbochs+"mbochs-medium/create", uuidB+"x", "EINVAL: 37 bytes must end in a newline"),
			write(mbochs+"mbochs-medium/create", uuidB+"\n", "a UUID with its newline"),
			write(mbochs+"mbochs-large/create", uuidC, create),
			write(mbochs+"mbochs-large/create", uuidD, create),
			write(mbochs+"mbochs-large/create", uuidE, "ENOSPC when the pool is short"),
		},
		mdevCounts(create),
		[]Step{
			list(mbochs+"mbochs-large/devices", "", "devices/ lists the instances"),
			link(mdevDevs+uuidA+"/mdev_type", create),
			link(mdevDevs+uuidA+"/driver", "instances bind to the parent's mdev driver"),
			group(mdevDevs+uuidA, "an mdev on its driver has its own group and /dev/vfio node"),
			write("/sys/bus/mdev/drivers/mbochs/bind", uuidA, "bind on an mdev driver: ENODEV (or EBUSY when bound)"),
			write(mdevDevs+uuidA+"/remove", "abc", remove),
			write(mdevDevs+uuidA+"/remove", "0", remove),
			exists(mdevDevs+uuidA, remove),
			open(mdevDevs+uuidA, blocks),
			start(mdevDevs+uuidA+"/remove", "1", blocks),
			pending(blocks),
			closeDev(mdevDevs+uuidA, blocks),
			wait(blocks),
			exists(mdevDevs+uuidA, blocks),
			write(mdevDevs+uuidB+"/remove", "1", remove),
			write(mdevDevs+uuidC+"/remove", "1", remove),
			write(mdevDevs+uuidD+"/remove", "1", remove),
			write(mtty+"mtty-2/create", uuidE, create),
			write(mtty+"mtty-1/create", uuidF, create),
		},
		mdevCounts(create),
		[]Step{
			link(mdevDevs+uuidE+"/driver", "instances bind to the parent's mdev driver"),
			group(mdevDevs+uuidE, create),
			write(mdevDevs+uuidE+"/remove", "1", remove),
			write(mdevDevs+uuidF+"/remove", "1", remove),
		},
		mdevCounts("back to boot"),

		// --- hot remove and rescan
		[]Step{
			write(igb+"/remove", "0", "remove: 0 does nothing"),
			exists(igb, "remove: 0 does nothing"),
			write(igb+"/remove", "1", "remove takes the device out"),
			exists(igb, "remove takes the device out"),
			exists("/sys/bus/pci/drivers/igb/"+IGBAddr, "remove takes the device out"),
			write("/sys/bus/pci/rescan", "1", "rescan brings it back and probes it"),
			settle(igb, "igb", "rescan brings it back and probes it"),
		},

		// --- the end state equals the boot state
		pciIdentity(igb, "end"), sriovAttrs(igb, "end"),
		pciIdentity(nvme, "end"), sriovAttrs(nvme, "end"),
	)
}
