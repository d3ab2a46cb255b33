package simkernel

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Versions of the NVIDIA vGPU host driver (the vGPU Manager) a host runs
// by default: vGPU 16.9 and 17.0 (anomixer/proxmox-vgpu-installer,
// driver_patches.json). The branch, the first number, is the vGPU
// release's: R535 is 16, R550 17.
const (
	NVIDIADriverVGPU16 = "535.230.02"
	NVIDIADriverVGPU17 = "550.54.10"
)

// nvPerVFBranch is the first branch whose VFs can take a vGPU type each
// (vGPU 17's vendor-specific VFIO framework).
const nvPerVFBranch = 550

// nvVersion is NV_VERSION_STRING's form: dotted numbers.
var nvVersion = regexp.MustCompile(`^[0-9]+(\.[0-9]+)+$`)

// nvVFs is how a model's VFs take vGPUs under the nvidia driver: a host
// driver serves one of the two ways for all its SR-IOV GPUs, as a host with
// the vendor-specific VFIO framework has no mdev framework (AIE5 §2.8.3).
type nvVFs int

const (
	nvVFsNone  nvVFs = iota
	nvVFsTyped       // nvidia/current_vgpu_type per VF: R550+ on a kernel 6.8+ host
	nvVFsMdev        // an mdev per VF: before R550, or R550+ on an older kernel
)

func (m *modelDef) nvVFs() nvVFs {
	switch {
	case m.vfNV != nil:
		return nvVFsTyped
	case m.vfMdev != nil && m.vfMdev.driver == MdevDrvNVIDIA:
		return nvVFsMdev
	}
	return nvVFsNone
}

// loadsNVIDIA reports whether the host loads the nvidia module: a model
// that needs it, or a test that asks for it.
func (h Host) loadsNVIDIA() bool {
	if slices.Contains(h.Loaded, DrvNVIDIA) {
		return true
	}
	return slices.ContainsFunc(h.GPUs, func(g HostGPU) bool {
		m, ok := lookupModel(g.Model)
		return ok && slices.Contains(m.modules, DrvNVIDIA)
	})
}

// nvidiaDriver is the version the host's nvidia module reports: the one
// the host file names, else vGPU 16's on a host whose VFs take mdevs and
// vGPU 17's on the others.
func (h Host) nvidiaDriver() string {
	if h.NVIDIADriver != "" {
		return h.NVIDIADriver
	}
	for _, g := range h.GPUs {
		if m, ok := lookupModel(g.Model); ok && m.nvVFs() == nvVFsMdev {
			return NVIDIADriverVGPU16
		}
	}
	return NVIDIADriverVGPU17
}

// validateNVIDIA checks nvidiaDriver and the NVIDIA models against the one
// host driver they share.
func (h Host) validateNVIDIA() error {
	if h.NVIDIADriver != "" {
		if !nvVersion.MatchString(h.NVIDIADriver) {
			return fmt.Errorf("nvidiaDriver: %q is not a driver version (dotted numbers, like %s)", h.NVIDIADriver, NVIDIADriverVGPU17)
		}
		if !h.loadsNVIDIA() {
			return fmt.Errorf("nvidiaDriver: no GPU of the host loads the nvidia driver")
		}
	}
	typed, mdevs := -1, -1
	for i, g := range h.GPUs {
		m, ok := lookupModel(g.Model)
		switch {
		case !ok:
		case m.nvVFs() == nvVFsTyped && typed < 0:
			typed = i
		case m.nvVFs() == nvVFsMdev && mdevs < 0:
			mdevs = i
		}
	}
	if typed >= 0 && mdevs >= 0 {
		return fmt.Errorf("gpus[%d].model: %s takes a vGPU type per VF and %s (gpus[%d]) an mdev per VF: one NVIDIA host driver serves one of the two",
			typed, h.GPUs[typed].Model, h.GPUs[mdevs].Model, mdevs)
	}
	if typed >= 0 {
		v := h.nvidiaDriver()
		if b, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0]); b < nvPerVFBranch {
			return fmt.Errorf("nvidiaDriver: %s is older than R%d (vGPU 17), which brought the per-VF vGPU types of model %s (gpus[%d])",
				v, nvPerVFBranch, h.GPUs[typed].Model, typed)
		}
	}
	return nil
}

// addNVIDIAModule is the nvidia module's /sys/module entry as it loads;
// MODULE_VERSION shows as "<version>\n" (open-gpu-kernel-modules
// kernel-open/nvidia/nv.c).
func (k *Kernel) addNVIDIAModule() {
	k.constAttr(k.mkdirAll(sysfs.Modules+"/"+DrvNVIDIA), "version", k.host.nvidiaDriver()+"\n")
}
