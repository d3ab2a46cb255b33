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
	// NVIDIADriverDatacenter is the datacenter driver the real H200 host
	// ran (docs/real-hosts.md), a datacenter host's default.
	NVIDIADriverDatacenter = "580.159.04"
)

// NVIDIA driver kinds (Host.NVIDIADriverKind).
const (
	NVIDIAVGPUHost   = "vgpu-host"
	NVIDIADatacenter = "datacenter"
)

// nvidiaKind is the host's NVIDIA driver kind: the host file's, else the
// datacenter driver in a guest (NVIDIA's vGPU Manager runs on bare metal)
// and the vGPU host driver otherwise.
func (h Host) nvidiaKind() string {
	switch {
	case h.NVIDIADriverKind != "":
		return h.NVIDIADriverKind
	case h.Guest != "":
		return NVIDIADatacenter
	}
	return NVIDIAVGPUHost
}

// nvVGPUHost: the nvidia module is the vGPU host driver, whose
// nvidia_vgpu_vfio registers mdev types and per-VF vGPU types.
func (h Host) nvVGPUHost() bool { return h.nvidiaKind() == NVIDIAVGPUHost }

// NVIDIAVGPUHost reports whether the host's nvidia module is NVIDIA's vGPU
// host driver, for a fake NVML of the same driver.
func (h Host) NVIDIAVGPUHost() bool { return h.nvVGPUHost() }

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

// hasNVVFs reports whether a model of the host has NVIDIA VFs of kind v.
func (h Host) hasNVVFs(v nvVFs) bool {
	return slices.ContainsFunc(h.GPUs, func(g HostGPU) bool {
		m, ok := lookupModel(g.Model)
		return ok && m.nvVFs() == v
	})
}

// nvidiaDriver is the version the host's nvidia module reports: the one
// the host file names, else vGPU 16's on a host whose VFs take mdevs and
// vGPU 17's on the others.
func (h Host) nvidiaDriver() string {
	switch {
	case h.NVIDIADriver != "":
		return h.NVIDIADriver
	case !h.nvVGPUHost():
		return NVIDIADriverDatacenter
	case h.hasNVVFs(nvVFsMdev):
		return NVIDIADriverVGPU16
	}
	return NVIDIADriverVGPU17
}

// Kernel releases a host runs by default: the xe ABI's (6.19 for its
// default, 7.0, or 6.12 before 6.19), else 6.5 where NVIDIA VFs take mdevs
// under R550+ (6.8 brought the VFIO variant drivers its per-VF types use:
// AIE5 §2.8.3).
const (
	Kernel619          = "6.19.0"
	KernelBeforeNVVFIO = "6.5.0"
)

// kernelRelease is what /proc/sys/kernel/osrelease shows: the host file's,
// else one that agrees with the host's xe ABI and NVIDIA VFs.
func (h Host) kernelRelease() string {
	switch {
	case h.Kernel != "":
		return h.Kernel
	case h.XeAdmin == XeAdmin70:
		return "7.0.0"
	case h.XeAdmin == XeAdminNone:
		return "6.12.0"
	case h.XeAdmin == "" && h.loadsNVIDIA() && h.nvVGPUHost() && h.nvBranch() >= nvPerVFBranch && h.hasNVVFs(nvVFsMdev):
		return KernelBeforeNVVFIO
	}
	return Kernel619
}

// kernelVersion is a release's major and minor ("6.8.0-31-generic": 6, 8);
// ok false when it does not start so.
func kernelVersion(release string) (major, minor int, ok bool) {
	m := kernelReleaseRE.FindStringSubmatch(release)
	if m == nil {
		return 0, 0, false
	}
	major, _ = strconv.Atoi(m[1])
	minor, _ = strconv.Atoi(m[2])
	return major, minor, true
}

var kernelReleaseRE = regexp.MustCompile(`^([0-9]+)\.([0-9]+)(\.[0-9]+)?([-+~.][0-9A-Za-z._+~-]*)?$`)

// nvPerVFKernel: the host's kernel has the VFIO variant drivers (6.8+).
func (h Host) nvPerVFKernel() bool {
	major, minor, _ := kernelVersion(h.kernelRelease())
	return major > 6 || major == 6 && minor >= 8
}

// nvBranch is the first number of the host driver's version.
func (h Host) nvBranch() int {
	b, _ := strconv.Atoi(strings.SplitN(h.nvidiaDriver(), ".", 2)[0])
	return b
}

// validateNVIDIA checks nvidiaDriver, the kernel and the NVIDIA models
// against the one host driver they share.
func (h Host) validateNVIDIA() error {
	if h.Kernel != "" {
		if _, _, ok := kernelVersion(h.Kernel); !ok {
			return fmt.Errorf("kernel: %q is not a kernel release (like %s)", h.Kernel, Kernel619)
		}
	}
	if h.NVIDIADriver != "" {
		if !nvVersion.MatchString(h.NVIDIADriver) {
			return fmt.Errorf("nvidiaDriver: %q is not a driver version (dotted numbers, like %s)", h.NVIDIADriver, NVIDIADriverVGPU17)
		}
		if !h.loadsNVIDIA() {
			return fmt.Errorf("nvidiaDriver: no GPU of the host loads the nvidia driver")
		}
	}
	switch h.NVIDIADriverKind {
	case "":
	case NVIDIAVGPUHost, NVIDIADatacenter:
		if !h.loadsNVIDIA() {
			return fmt.Errorf("nvidiaDriverKind: no GPU of the host loads the nvidia driver")
		}
	default:
		return fmt.Errorf("nvidiaDriverKind: unknown %q (allowed: %s, %s)", h.NVIDIADriverKind, NVIDIAVGPUHost, NVIDIADatacenter)
	}
	if !h.nvVGPUHost() {
		return nil // no vGPU: the branch and the kernel rule nothing
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
		if h.nvBranch() < nvPerVFBranch {
			return fmt.Errorf("nvidiaDriver: %s is older than R%d (vGPU 17), which brought the per-VF vGPU types of model %s (gpus[%d])",
				v, nvPerVFBranch, h.GPUs[typed].Model, typed)
		}
		if !h.nvPerVFKernel() {
			return fmt.Errorf("kernel: %s is older than 6.8, whose VFIO variant drivers the per-VF vGPU types of model %s (gpus[%d]) need; before it R%d+ gives each VF an mdev",
				h.kernelRelease(), h.GPUs[typed].Model, typed, nvPerVFBranch)
		}
	}
	if mdevs >= 0 && h.loadsNVIDIA() && h.nvBranch() >= nvPerVFBranch && h.nvPerVFKernel() {
		return fmt.Errorf("kernel: on %s R%d+ gives each VF a vGPU type, not an mdev as model %s (gpus[%d]) has; name a kernel before 6.8 or a model with per-VF types",
			h.kernelRelease(), nvPerVFBranch, h.GPUs[mdevs].Model, mdevs)
	}
	return nil
}

// addNVIDIAModule is the nvidia module's /sys/module entry as it loads;
// MODULE_VERSION shows as "<version>\n" (open-gpu-kernel-modules
// kernel-open/nvidia/nv.c). The vGPU host driver loads nvidia_vgpu_vfio
// beside it, which has no version of its own (NVIDIA's vGPU Manager
// container checks its refcnt: gpu-driver-container vgpu-manager/).
func (k *Kernel) addNVIDIAModule() {
	k.constAttr(k.mkdirAll(sysfs.Modules+"/"+DrvNVIDIA), "version", k.host.nvidiaDriver()+"\n")
	if k.host.nvVGPUHost() {
		k.constAttr(k.mkdirAll(sysfs.Modules+"/"+ModNVIDIAVGPUVFIO), "refcnt", "0\n")
	}
}

// addKernelRelease is /proc/sys/kernel/osrelease, which every Linux has.
func (k *Kernel) addKernelRelease() {
	k.constAttr(k.mkdirAll(sysfs.Proc+"/sys/kernel"), "osrelease", k.host.kernelRelease()+"\n")
}
