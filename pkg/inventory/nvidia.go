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
// each: R550, vGPU 17 (docs/vendors/nvidia.md).
const perVFBranch = 550

// readNVIDIABranch returns the branch of the loaded nvidia module, the
// first number of its version (550 for "550.54.10"); 0 when the module is
// not loaded or its version is not dotted numbers.
func readNVIDIABranch(f sysfs.FS) (int, error) {
	v, err := sysfs.ReadString(f, NVIDIAVersion)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the nvidia module's version: %w", err)
	}
	return parseBranch(v), nil
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
// driver's branch (0: unknown) picks per-VF types from R550 on and an mdev
// per VF before; without it the id's generation is the guess. R550+ on a
// kernel before 6.8 keeps mdevs, so once VFs exist their word wins.
func nvidiaGeneration(device uint16, branch int) nvidiaGen {
	gen := nvidiaByDevice(device)
	switch {
	case gen == nvidiaPFMdev || branch == 0:
		return gen
	case branch >= perVFBranch:
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
		0x2321, 0x2322, 0x2324, 0x2330, 0x2331, 0x2336, 0x2339: // H100 NVL, H800, H100
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
