package deviceplugin

import (
	"fmt"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/profile"
)

// NVIDIADomain is where NVIDIA's KubeVirt device plugin puts its
// resources (kubevirt-gpu-device-plugin, DeviceNamespace).
const NVIDIADomain = "nvidia.com"

// Prefixes of the variables KubeVirt's virt-launcher reads the allocated
// devices from (kubevirt.io/api core/v1: MDevResourcePrefix,
// PCIResourcePrefix).
const (
	mdevEnvPrefix = "MDEV_PCI_RESOURCE"
	pciEnvPrefix  = "PCI_RESOURCE"
)

// ResourceName is domain/name, or an error saying why the kubelet would
// refuse it: the name must be a qualified name's name part (at most 63
// characters, alphanumerics with '-', '_' and '.' inside), as
// IsExtendedResourceName checks it. The domain is checked by the config.
func ResourceName(domain, name string) (string, error) {
	if why := nameProblem(name); why != "" {
		return "", fmt.Errorf("resource %s/%s: the name %q %s, which the kubelet refuses", domain, name, name, why)
	}
	return domain + "/" + name, nil
}

func nameProblem(s string) string {
	if s == "" || len(s) > 63 {
		return "is empty or longer than 63 characters"
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i, c := range []byte(s) {
		edge := i == 0 || i == len(s)-1
		if !alnum(c) && (edge || c != '-' && c != '_' && c != '.') {
			return "does not start and end with a letter or digit, or holds a character other than letters, digits, '-', '_', '.'"
		}
	}
	return ""
}

// NVIDIAName is the name NVIDIA's KubeVirt device plugin gives a vGPU
// type: the type's name with each run of white space as one '_' ("GRID
// T4-4Q" is GRID_T4-4Q, resource nvidia.com/GRID_T4-4Q), as its
// readVgpuIDFromFile makes it from the mdev's mdev_type/name. ok is false
// for a profile that is not an NVIDIA vGPU type (another vendor,
// passthrough). NVIDIA's plugin names mdev types only; a per-VF type
// (vGPU 17+) gets its name by the same rule.
func NVIDIAName(p profile.Profile) (string, bool) {
	if p.Model.VendorID != 0x10de {
		return "", false
	}
	name := p.Mdev.Name
	if name == "" {
		name = p.NVIDIA.Name
	}
	if name == "" {
		return "", false
	}
	return strings.Join(strings.Fields(name), "_"), true
}

// EnvName is the variable KubeVirt reads a resource's devices from:
// MDEV_PCI_RESOURCE_<NAME> for mdevs, PCI_RESOURCE_<NAME> for PCI
// functions, NAME the resource name upper-cased with '/' and '.' as '_'
// (kubevirt pkg/util.ResourceNameToEnvVar): vgpu.example.org/l40s-12q is
// PCI_RESOURCE_VGPU_EXAMPLE_ORG_L40S-12Q.
func EnvName(resource string, mdev bool) string {
	prefix := pciEnvPrefix
	if mdev {
		prefix = mdevEnvPrefix
	}
	v := strings.ToUpper(resource)
	v = strings.ReplaceAll(v, "/", "_")
	v = strings.ReplaceAll(v, ".", "_")
	return prefix + "_" + v
}

// socketName is the file of a resource's endpoint in the kubelet's plugin
// directory: vgpud-<domain>_<name>.sock. The kubelet removes every socket
// there when it starts; vgpud makes its own again.
func socketName(resource string) string {
	return "vgpud-" + strings.ReplaceAll(resource, "/", "_") + ".sock"
}
