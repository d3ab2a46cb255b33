// Package simkernel is the fake kernel: one in-memory model of how Linux
// sysfs and /dev/vfio react to the writes vgpu makes, built from a host
// description (LoadHost/ParseHost, or a Host literal) and used in process
// as a sysfs.FS by unit tests, and served over FUSE by vgpusim.
//
// What it models, as measured on Linux 6.1/6.12 (docs/lab.md, "The
// differential test")
// and as the kernel sources say:
//
//   - PCI: /sys/devices/pci<dom>:<bus>/<root port>/<device> with vendor,
//     device, class, numa_node, driver_override ("(null)" when unset),
//     modalias, uevent, enable, reset_method, reset, remove, rescan, the
//     iommu_group link (each function its own group, lowest free number as
//     the kernel's IDA hands them out; a card's extra functions, such as
//     the RTX 3090's HD audio at .1, share the PF's, and sharedGroup
//     devices share their root port's) and the driver link. Root ports are
//     real devices (8086:2030, class 0x060400, driver pcieport). amdgpu
//     adds mem_info_vram_total to the AMD PFs it drives (gim does not).
//   - Drivers, tried in registration order on probe: pcieport, pci-stub
//     (configured with the GIM VF ids, as GIM hosts do), vfio-pci, gim,
//     sriov-standin, nvidia, pci-pf-stub, i915, nvme, nouveau, amdgpu, igb,
//     igbvf; only those the host's models need are loaded (amdgpu only when
//     the host file names it: GIM hosts blacklist it).
//   - Old AMD GIM (gim.go, from its source): a NULL id_table, so it binds
//     nothing and the S7150 PF has no driver link; at load it reads
//     /etc/gim_config, lets module parameters override it, writes every
//     option back (no O_TRUNC) and enables vf_num VFs (0: all) on each
//     S7150; at unload it disables them, waiting for VFIO users. modprobe
//     (RunTool; vgpusim serves it to its wrapper over a socket) loads and
//     unloads it with kmod's messages and exit codes; a fault on
//     /usr/sbin/modprobe fails the n-th run. The mi25 model is a stand-in
//     for a generic sriov_configure PF driver ("sriov-standin"): no public
//     KVM driver enables SR-IOV on an MI25. bind/unbind/new_id/remove_id/drivers_probe follow
//     drivers/base and drivers/pci: ENODEV when the driver does not match
//     (driver_override decides alone when set) or when a VF's PF has
//     sriov_drivers_autoprobe=0 and the override does not name the driver;
//     EBUSY when already bound; probe failures leave the device unbound.
//     vfio-pci refuses bridges and NVIDIA per-VF-type VFs (EINVAL) and PFs
//     with VFs enabled (EBUSY); nvme fails on its VFs (ENODEV); igbvf takes
//     the igb VFs.
//   - SR-IOV: sriov_numvfs with the kernel's checks in order (kstrtou16,
//     any failure EINVAL, overflow too; ERANGE above sriov_totalvfs, same
//     value no-op, ENOENT without a driver or with one lacking
//     sriov_configure — vfio-pci without enable_sriov, pci-stub, amdgpu,
//     nouveau —, EBUSY on N->M). sriov_totalvfs is the limit the PF's own
//     driver set while bound (igb: 7 of the 82576's 8), else the
//     hardware's. VF addresses are PF RID + offset + n*stride, carrying into
//     the device number (igb: 01:10.0, 01:10.2, ...). New VFs are probed
//     when the bus and the PF allow it. Disabling VFs, and a vendor PF
//     driver's remove(), remove every VF, last first; nvme's remove()
//     leaves SR-IOV enabled.
//   - VFIO: /dev/vfio/vfio always; /dev/vfio/<group> while the group's
//     member is a VFIO device: a PCI function on vfio-pci, an mdev on its
//     driver, or an L40S VF on nvidia with a vGPU type set. A group admits
//     one opener (EBUSY). Everything that removes a VFIO device — unbind,
//     sriov_numvfs=0, mdev remove, device remove, a parent driver's unbind
//     — blocks while the group is open and completes after the last Close.
//     An open group stands for a VFIO user holding the device (QEMU: group,
//     container and device fd): on a real kernel a bare open of the group
//     node does not block removal, a held device does (measured, e2e/lab).
//   - /proc: each opener of a device node is a process, /proc/<pid>/comm
//     and /proc/<pid>/fd/<n> linking to the node's absolute path (as proc's
//     magic links read: "/dev/vfio/12"); the pid's directory goes with its
//     last open node. Open makes a new "qemu-system-x86"; OpenAs names the
//     process (the FUSE layer passes its caller's). SetFDsUnreadable hides a
//     process's fd links (readlink EACCES), as from a reader without
//     CAP_SYS_PTRACE (measured in e2e/lab: root without it reads no
//     /proc/1/fd link).
//   - mdev (kernel >= 6.1): type dirs are "<dev_driver_string(parent)>-
//     <sysfs_name>", name falls back to the sysfs name when the driver has
//     no pretty name, description only where the driver has one. create:
//     EINVAL unless 36 (or 37) bytes starting with a UUID, EEXIST if any
//     parent has it, ENOSPC when the type has no room. remove: EINVAL
//     unless a number, "0" does nothing, non-zero removes. Instances bind
//     to the parent's mdev driver: "mtty", "mbochs" (the sample modules),
//     "intel_vgpu_mdev" (GVT-g), "nvidia-vgpu-vfio" (NVIDIA); the mdev bus
//     never matches, so bind on an mdev driver is ENODEV.
//   - boot_vga on VGA-class functions (pci-sysfs.c), 1 on the host file's
//     bootVGA device. A noIOMMU host puts no function in a group (no
//     iommu_group links, /sys/kernel/iommu_groups empty) and vfio-pci
//     takes none (EINVAL, vfio_device_set_group). A guest: qemu host has
//     QEMU's i440FX host bridge (8086:1237, subsystem 1af4:1100) at
//     0000:00:00.0.
//   - Which NVIDIA driver (nvidiaDriverKind): the vGPU host driver has
//     /sys/module/nvidia_vgpu_vfio, mdev and per-VF types and sriov-manage;
//     the datacenter driver none of them, and its nvidia ignores VFs
//     ("Ignoring probe for VF", nv-pci.c; the vGPU host driver likewise
//     aborts a VF's probe without an IOMMU; docs/vendors/nvidia.md,
//     "Which driver").
//   - NVIDIA per-VF vGPU (L40S, vGPU 17+): <VF>/nvidia/creatable_vgpu_types
//     and current_vgpu_type, as nvidia-vgpu-vfio's store takes it
//     (storeCurrentType: decimal only, EPERM for a second type or a 0 on a
//     free VF, EIO for a type not creatable); /dev/vfio/<group> from the
//     VF's probe, an open ENODEV until a type is set.
//   - GVT-g (gvtg): the iGPU is an mdev parent only with i915.enable_gvt
//     and module kvmgt (Host.I915EnableGVT, Host.KVMGT, modprobe kvmgt).
//   - xe's vfN/stop stops the VF until its FLR (ESTALE for a second stop).
//   - NVIDIA SR-IOV: the nvidia driver has no sriov_configure (nv-pci.c's
//     nv_pci_driver), so sriov_numvfs on its PF is ENOENT, and its remove()
//     leaves SR-IOV enabled. pci-pf-stub (no ids of its own, new_id only,
//     sriov_configure_simple, no remove()) is loaded with the NVIDIA SR-IOV
//     models. /proc/driver/nvidia/gpus/<bdf>/unbindLock exists while nvidia
//     drives the PF; writing 1 takes the lock unless an NVML client holds
//     the GPU (SetNVMLClients), and it reads back 1 only when taken.
//     NVIDIA's sriov-manage is the host's tool (RunTool, internal/sim/tools;
//     InstallTool links it into a FUSE mount), making the script's writes.
//   - MIG-backed vGPU (a100-vf, h100-vf, a30-vf, with an NVML joined by
//     SetMIG; mig.go, docs/vendors/nvidia.md "MIG-backed vGPU"): with MIG on a VF lists only
//     MIG-backed types, each while a GPU instance of its profile carries no vGPU, and
//     writing one takes the lowest such instance (held: NVML refuses to
//     destroy it); a type not creatable now is EIO (cubecos). The PF's
//     unbind from nvidia (sriov-manage's rebind) wipes every instance; VFs
//     make a MIG mode change pend; an open NVML session holds the unbind
//     lock.
//
// Choices where the measurements are silent:
//
//   - An empty write reaches no store method (sysfs_kf_write returns 0), so
//     writing "" to driver_override is a no-op; "\n" clears it.
//   - Writes and faults count under the canonical path of the attribute,
//     whatever symlinks the caller went through; failed writes count too.
//   - The nvme VF bind fails ENODEV at once; on a real kernel nvme takes the
//     VF and drops it when the controller does not come up. The end state,
//     unbound, is the same.
//   - An NVIDIA VF with a type: "0" while the VF's group is open is EBUSY
//     (the upstream RFC's; R550's glue says EPERM). A VF with a type lists
//     no creatable types; the others list types of the size in use (any
//     size on an idle GPU) that still fit in the framebuffer.
//   - NVIDIA GPUs host one mdev type at a time (T4 per GPU, A100 across the
//     VFs of one GPU); other types show available_instances 0. NVIDIA has
//     no published errno for "does not fit": ENOSPC, as the samples.
//   - Numbers are parsed as the kernel's kstrtoul/kstrtobool do (base 0:
//     "010" is 8; kstrtobool as in 6.2+, accepting true/false/enable).
//   - Boot drivers are bound directly (as ids= module options or driverctl
//     would), without leaving a driver_override behind.
//
// e2e/lab's differential test runs one scripted sequence against this fake
// and against Linux 6.12 in a QEMU guest and requires equal answers;
// docs/lab.md lists which of the reactions above it covers.
//
// No package-level mutable state: a Kernel owns everything, guarded by one
// mutex; operations that block wait on a condition variable.
package simkernel
