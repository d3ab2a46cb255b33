// Package xe reads and writes Intel xe's SR-IOV scheduling profiles: the
// PF's sriov_admin/ directory (Linux 6.19+, Documentation/ABI/testing/
// sysfs-driver-intel-xe-sriov; docs/vendors/intel.md).
//
//	<PF>/sriov_admin/vfN/profile/{exec_quantum_ms,preempt_timeout_us}   u32, RW
//	<PF>/sriov_admin/vfN/profile/sched_priority   "[low] normal", RO for a VF
//	<PF>/sriov_admin/.bulk_profile/sched_priority WO, every function at once
//	<PF>/sriov_admin/vfN/profile/vram_quota      u64 bytes, RW (Linux 7.0+)
//
// xe resets a VF's profile when its VFs are disabled, and releases every
// VF's VRAM. Its VFs migrate on the VFIO variant driver xe-vfio-pci.
package xe
