package config

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// Version is the only config schema version this package reads.
const Version = "v1"

// Defaults.
const (
	DefaultPath        = "/etc/vgpud/config.yaml"
	DefaultSocketGroup = "libvirt"
	DefaultOnRelease   = ReleaseKeep
	// DefaultDevicePluginDir is where the kubelet looks for device plugin
	// sockets and listens on kubelet.sock (v1beta1.DevicePluginPath).
	DefaultDevicePluginDir = "/var/lib/kubelet/device-plugins"
	// DefaultPodResourcesSocket is the kubelet's PodResources API.
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
)

// ReleasePolicy is what happens to a vGPU when the VM holding it stops.
type ReleasePolicy string

const (
	// ReleaseKeep leaves the VF or mdev carved and marks it free: the next
	// VM starts without a kernel change.
	ReleaseKeep ReleasePolicy = "keep"
	// ReleaseDestroy removes the mdev or clears the NVIDIA vGPU type. VFs
	// stay enabled and bound: re-creating them would disturb their siblings.
	ReleaseDestroy ReleasePolicy = "destroy"
)

func releasePolicies() []string { return []string{string(ReleaseKeep), string(ReleaseDestroy)} }

// Config is one decoded host config.
type Config struct {
	// Path names the file in messages; "" for a config built in code.
	Path      string        `json:"path,omitempty"`
	Version   string        `json:"version"`
	GPUs      []Entry       `json:"gpus,omitempty"`
	Socket    Socket        `json:"socket"`
	OnRelease ReleasePolicy `json:"onRelease"`
	Metrics   Metrics       `json:"metrics"`
	// Kubernetes is vgpud's device plugin for the kubelet.
	Kubernetes Kubernetes `json:"kubernetes"`

	// lines maps field paths ("gpus[1].profile") to their line.
	lines map[string]int
}

// Socket configures the API's unix socket.
type Socket struct {
	// Group owns the socket (mode 0660): its members may read the API.
	Group string `json:"group"`
	// AdminGroup's members may also change the host (carve, reserve,
	// apply...); "" leaves that to root.
	AdminGroup string `json:"adminGroup,omitempty"`
}

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	// Listen is host:port to serve /metrics on; "" serves none.
	Listen string `json:"listen,omitempty"`
}

// Kubernetes configures the kubelet device plugin (docs/kubevirt.md): one
// endpoint per profile carved here, resource <ResourceDomain>/<profile>.
type Kubernetes struct {
	DevicePlugin bool `json:"devicePlugin"`
	// ResourceDomain prefixes the resource names: a DNS subdomain the
	// cluster's admin owns (vgpu.example.org). Required with DevicePlugin.
	ResourceDomain string `json:"resourceDomain,omitempty"`
	// NVIDIAResourceNames also advertises NVIDIA's vGPU profiles under the
	// names NVIDIA's KubeVirt device plugin gives them,
	// nvidia.com/<TYPE_NAME> ("GRID T4-4Q" as nvidia.com/GRID_T4-4Q).
	NVIDIAResourceNames bool `json:"nvidiaResourceNames,omitempty"`
	// DevicePluginDir holds the kubelet's registration socket
	// (kubelet.sock) and vgpud's plugin sockets.
	DevicePluginDir string `json:"devicePluginDir"`
	// PodResourcesSocket is the kubelet's PodResources API, which says
	// which pods hold which devices.
	PodResourcesSocket string `json:"podResourcesSocket"`
}

// Entry is one item of gpus: a selector (exactly one of Address, ID, All,
// Parent) and the profile every GPU it selects carries.
type Entry struct {
	Address pci.Address `json:"address,omitzero"`
	ID      PCIID       `json:"id,omitzero"`
	// All selects every GPU of the profile's model.
	All bool `json:"all,omitempty"`
	// Parent selects a virtual mdev parent by name (the kernel's mbochs
	// sample): one with no PCI device behind it, whose profile matches it
	// with mdev-parent.
	Parent  string `json:"parent,omitempty"`
	Profile string `json:"profile"`
	// MdevUUIDs pins the UUIDs of the first mdevs of the entry's pool (an
	// address or parent entry of an mdev or sriov-mdev profile), in order:
	// the carve makes, keeps and re-makes those, so a domain whose XML names
	// one finds it after every carve and reboot. Lower case.
	MdevUUIDs []string `json:"mdevUUIDs,omitempty"`
}

// Selector says what the entry selects, for messages.
func (e Entry) Selector() string {
	switch {
	case !e.Address.IsZero():
		return "address " + e.Address.String()
	case !e.ID.IsZero():
		return "id " + e.ID.String()
	case e.All:
		return "all GPUs of " + e.Profile + "'s model"
	case e.Parent != "":
		return "mdev parent " + e.Parent
	}
	return "nothing"
}

// Default is the config of a host without a config file: no GPU is
// managed, and everything else has its default.
func Default() *Config {
	return &Config{Version: Version, Socket: Socket{Group: DefaultSocketGroup}, OnRelease: DefaultOnRelease,
		Kubernetes: Kubernetes{DevicePluginDir: DefaultDevicePluginDir, PodResourcesSocket: DefaultPodResourcesSocket}}
}

// Load reads and parses the config file at path. A missing file is an error
// matching fs.ErrNotExist; the caller decides whether Default will do.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read host config %s: %w", path, err)
	}
	return Parse(path, data)
}

// Line is where field ("gpus[1].profile") is written; 0 when unknown.
func (c *Config) Line(field string) int {
	for f := field; f != ""; {
		if l, ok := c.lines[f]; ok {
			return l
		}
		// Fall back to the enclosing field: gpus[1].id -> gpus[1].
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return 0
}

// PCIID is a vendor:device pair as lspci -n prints it: 10de:1eb8.
type PCIID struct {
	Vendor uint16
	Device uint16
}

// ParsePCIID reads "10de:1eb8" (4 hex digits each).
func ParsePCIID(s string) (PCIID, error) {
	v, d, ok := strings.Cut(s, ":")
	vendor, err1 := strconv.ParseUint(v, 16, 16)
	device, err2 := strconv.ParseUint(d, 16, 16)
	if !ok || len(v) != 4 || len(d) != 4 || err1 != nil || err2 != nil {
		return PCIID{}, fmt.Errorf("invalid PCI id %q (want vendor:device in hex, e.g. 10de:1eb8)", s)
	}
	return PCIID{Vendor: uint16(vendor), Device: uint16(device)}, nil
}

func (id PCIID) String() string { return fmt.Sprintf("%04x:%04x", id.Vendor, id.Device) }

// IsZero reports whether id is unset.
func (id PCIID) IsZero() bool { return id == PCIID{} }

// Matches reports whether g has this id.
func (id PCIID) Matches(g inventory.GPU) bool {
	return g.VendorID == id.Vendor && g.DeviceID == id.Device
}

// MarshalText implements encoding.TextMarshaler.
func (id PCIID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *PCIID) UnmarshalText(b []byte) error {
	v, err := ParsePCIID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}
