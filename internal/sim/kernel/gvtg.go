package simkernel

import (
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// GVT-g as Linux 6.x wires it (drivers/gpu/drm/i915/intel_gvt.c, kvmgt.c):
// i915 keeps its GPUs on a list, and intel_gvt_init_device makes one an
// mdev parent only when i915.enable_gvt is set ("GVT-g is disabled by
// kernel params" otherwise) and kvmgt's init has registered its ops
// (intel_gvt_set_ops, which then initialises every GPU already probed).
// kvmgt also registers the mdev driver intel_vgpu_mdev.

// addI915Module shows i915's enable_gvt parameter (bool, 0400, as
// i915_params.h declares it with CONFIG_DRM_I915_GVT).
func (k *Kernel) addI915Module() {
	v := "N\n"
	if k.host.I915EnableGVT {
		v = "Y\n"
	}
	n := k.constAttr(k.mkdirAll(sysfs.Modules+"/"+DrvI915+"/parameters"), "enable_gvt", v)
	n.perm = 0o400
}

// gvtInitDevice is intel_gvt_init_device for d, just bound to i915.
// k.mu is held.
func (k *Kernel) gvtInitDevice(d *pciDev) {
	if !k.kvmgt || !k.host.I915EnableGVT || d.model == nil || d.model.pfMdev == nil || d.mdev != nil {
		return
	}
	k.registerParent(d.name, d.dir, d.model.pfMdev, newPool(d.model.pfMdev.capacity, d.model.pfMdev.mix), d)
}

// loadKVMGT is modprobe kvmgt: its mdev driver, then intel_gvt_set_ops
// over the GPUs i915 drives. k.mu is held.
func (k *Kernel) loadKVMGT() {
	if k.kvmgt {
		return
	}
	k.kvmgt = true
	k.mkdirAll(sysfs.Modules + "/kvmgt")
	if k.mdevDrivers[MdevDrvGVTg] == nil {
		k.registerMdevDriver(MdevDrvGVTg)
	}
	for _, d := range k.sortedDevs() {
		if d.driver != nil && d.driver.def.name == DrvI915 {
			k.gvtInitDevice(d)
		}
	}
}
