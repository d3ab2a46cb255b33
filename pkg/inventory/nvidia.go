package inventory

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// NVIDIAVersion is the loaded nvidia module's version, "550.54.10"
// (MODULE_VERSION in open-gpu-kernel-modules kernel-open/nvidia/nv.c); absent
// while the module is not loaded.
const NVIDIAVersion = sysfs.Modules + "/nvidia/version"

// perVFBranch is the first host-driver branch whose VFs take a vGPU type
// each: R550, vGPU 17, on a kernel of 6.8 or later (docs/vendors/nvidia.md).
const perVFBranch = 550

// NVIDIAVGPUModule is the vGPU Manager's kernel module, which only NVIDIA's
// vGPU host driver (the -vgpu-kvm package) has: it registers the PFs' mdev
// types and the VFs' VFIO devices. NVIDIA's own vGPU Manager container
// loads it (modprobe nvidia_vgpu_vfio) and checks this directory on every
// branch (docs/vendors/nvidia.md).
const NVIDIAVGPUModule = sysfs.Modules + "/nvidia_vgpu_vfio"

// KernelRelease is the running kernel's release ("6.8.0-31-generic").
const KernelRelease = sysfs.Proc + "/sys/kernel/osrelease"

// nvHost is what an NVIDIA host says of its driver: whether the nvidia
// module is loaded, its version and branch (0: unknown), whether it is
// the vGPU host driver, and whether the kernel is older than 6.8, which
// brought the VFIO variant drivers the per-VF types need (false when its
// release does not say).
type nvHost struct {
	loaded    bool
	version   string
	branch    int
	vgpuHost  bool
	oldKernel bool
}

// driver is the GPU-level account of h: nil without the module.
func (h nvHost) driver() *NVIDIADriver {
	if !h.loaded {
		return nil
	}
	return &NVIDIADriver{Version: h.version, VGPUHost: h.vgpuHost}
}

// readNVHost reads the nvidia module's version, whether the vGPU
// Manager's module is loaded and, for a branch with per-VF types, the
// kernel's release.
func readNVHost(f sysfs.FS) (nvHost, error) {
	v, loaded, err := readNVIDIAVersion(f)
	if err != nil || !loaded {
		return nvHost{}, err
	}
	h := nvHost{loaded: true, version: v, branch: parseBranch(v)}
	if h.vgpuHost, err = sysfs.Exists(f, NVIDIAVGPUModule); err != nil {
		return nvHost{}, fmt.Errorf("look for the vGPU Manager's module %s: %w", NVIDIAVGPUModule, err)
	}
	if h.branch < perVFBranch {
		return h, nil
	}
	r, err := sysfs.ReadString(f, KernelRelease)
	if errors.Is(err, fs.ErrNotExist) {
		return h, nil
	}
	if err != nil {
		return nvHost{}, fmt.Errorf("read the kernel's release: %w", err)
	}
	major, minor, ok := kernelVersion(r)
	h.oldKernel = ok && (major < 6 || major == 6 && minor < 8)
	return h, nil
}

// kernelVersion reads "6.8.0-31-generic" as 6, 8.
func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	minorDigits := parts[1]
	if i := strings.IndexFunc(minorDigits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorDigits = minorDigits[:i]
	}
	var err1, err2 error
	major, err1 = strconv.Atoi(parts[0])
	minor, err2 = strconv.Atoi(minorDigits)
	return major, minor, err1 == nil && err2 == nil
}

// readNVIDIABranch returns the branch of the loaded nvidia module, the
// first number of its version (550 for "550.54.10"); 0 when the module is
// not loaded or its version is not dotted numbers.
func readNVIDIABranch(f sysfs.FS) (int, error) {
	v, _, err := readNVIDIAVersion(f)
	return parseBranch(v), err
}

// readNVIDIAVersion reads the loaded nvidia module's version; loaded is
// false without the module.
func readNVIDIAVersion(f sysfs.FS) (version string, loaded bool, err error) {
	v, err := sysfs.ReadString(f, NVIDIAVersion)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the nvidia module's version: %w", err)
	}
	return strings.TrimSpace(v), true, nil
}

func parseBranch(v string) int {
	parts := strings.Split(v, ".")
	if len(parts) < 2 {
		return 0
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return 0
		}
	}
	b, err := strconv.Atoi(parts[0])
	if err != nil {
		return 0
	}
	return b
}

// nvidiaGen is how an NVIDIA SR-IOV GPU makes vGPUs.
type nvidiaGen int

const (
	nvidiaUnknown nvidiaGen = iota
	nvidiaPerVF             // a vGPU type per VF (vGPU 17+)
	nvidiaVFMdev            // one mdev per VF (before vGPU 17)
	nvidiaPFMdev            // Turing, Volta: SR-IOV capable, but vGPUs are PF mdevs
)

// nvidiaGeneration says how an NVIDIA GPU makes vGPUs before its VFs show
// it (the per-VF files and the VF mdev parents appear only with the VFs).
// Its device id says whether VFs are vGPUs at all; for those, the host
// driver's branch (0: unknown) picks per-VF types from R550 on, on a
// kernel of 6.8 or later, and an mdev per VF otherwise; without the branch
// the id's generation is the guess. Once VFs exist their word wins.
func nvidiaGeneration(device uint16, h nvHost) nvidiaGen {
	gen := nvidiaByDevice(device)
	switch {
	case gen == nvidiaPFMdev || h.branch == 0:
		return gen
	case h.branch >= perVFBranch && !h.oldKernel:
		return nvidiaPerVF
	}
	return nvidiaVFMdev
}

// nvidiaByDevice guesses from the device id alone: Ada and Hopper boards
// take a type per VF, Ampere boards an mdev per VF (as under vGPU 16),
// Turing and Volta make PF mdevs.
func nvidiaByDevice(device uint16) nvidiaGen {
	switch device {
	case 0x26b1, 0x26b5, 0x26b8, 0x26b9, 0x26ba, 0x27b8, // RTX 6000 Ada, L40, L40G, L40S, L20, L4
		0x2321, 0x2322, 0x2324, 0x2330, 0x2331, 0x2336, 0x2339, // H100 NVL, H800, H100
		0x2335, 0x233b: // H200 SXM, H200 NVL
		return nvidiaPerVF
	case 0x20b0, 0x20b1, 0x20b2, 0x20b3, 0x20b5, 0x20f1, // A100
		0x20f3, 0x20f5, 0x20f6, 0x20b7, // A800, A30
		0x2230, 0x2231, 0x2233, 0x2235, 0x2236, 0x2237, 0x25b6: // RTX A6000/A5000/A5500, A40, A10, A10G, A16/A2
		return nvidiaVFMdev
	case 0x1eb8, 0x1db4, 0x1db5, 0x1db6, 0x1df6: // T4, V100
		return nvidiaPFMdev
	}
	return nvidiaUnknown
}
