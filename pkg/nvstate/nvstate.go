package nvstate

import (
	"errors"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

// SimSocket is where, under a simulated host's root (a vgpusim mount), its
// fake NVML answers (pkg/nvstate/nvstaterpc): the binaries given --sysfs-root use
// it as they would use libnvidia-ml on a host.
const SimSocket = "run/vgpusim/nvml.sock"

// Sentinel errors callers branch on.
var (
	// ErrUnavailable: NVML cannot be used here (library missing, or a
	// static build without cgo).
	ErrUnavailable = errors.New("NVML unavailable")
	// ErrPending: a MIG mode change is pending; the GPU has clients or VFs.
	ErrPending = errors.New("MIG mode change pending")
	// ErrInUse: NVML refused because something uses the GPU or instance.
	ErrInUse = errors.New("in use")
	// ErrNoRoom: no free placement or capacity for another instance.
	ErrNoRoom = errors.New("no room for another GPU instance")
	// ErrNotSupported: the GPU lacks the feature, or it is not available
	// in the GPU's present mode (mixed-size mode with MIG on).
	ErrNotSupported = errors.New("not supported")
)

// Mode is a GPU's MIG mode: the one in force and the one asked for.
type Mode struct {
	Current, Pending bool
}

// Instance is one GPU instance.
type Instance struct {
	ID int `json:"id"` // GPU instance id, as nvidia-smi mig -lgi
	// ProfileID is the GPU instance profile's id as nvidia-smi mig -lgip
	// shows it (A100 40GB: 1g.5gb is 19), not NVML's index constant.
	ProfileID int `json:"profileID"`
	// Start and Size are the placement, in memory slices.
	Start int `json:"start"`
	Size  int `json:"size"`
}

// Manager reads and changes MIG state of GPUs by PCI address.
type Manager interface {
	Mode(gpu pci.Address) (Mode, error)
	// SetMode asks for MIG on or off; ErrPending when the change could not
	// take effect now (it then stays pending: set it back to cancel).
	SetMode(gpu pci.Address, on bool) error
	// Instances lists the GPU's instances by id; none while MIG is off.
	Instances(gpu pci.Address) ([]Instance, error)
	// Create makes an instance of profile id; at placement start when
	// start is not nil, else where the driver chooses.
	Create(gpu pci.Address, profileID int, start *int) (Instance, error)
	Destroy(gpu pci.Address, id int) error
	// Sizes is the GPU's memory as NVML states it: its total and its GPU
	// instance profiles (with MIG on or off; none on a GPU without MIG).
	// Both hold while the driver is loaded.
	Sizes(gpu pci.Address) (Sizes, error)
	// VGPUTypes lists the vGPU types the GPU supports, whatever is carved
	// (nvmlDeviceGetSupportedVgpus): the ids a catalog giving a type by
	// name only needs.
	VGPUTypes(gpu pci.Address) ([]VGPUType, error)
	// Scheduler reads the GPU's time-sliced vGPU scheduler.
	Scheduler(gpu pci.Address) (Sched, error)
	// SetScheduler sets it; the driver refuses (ErrInUse) while any vGPU
	// exists on the GPU, and it lasts until the module reloads.
	SetScheduler(gpu pci.Address, s Sched) error
	// MixedSize reads whether the GPU is in mixed-size mode (NVML's vGPU
	// heterogeneous mode: time-sliced vGPUs of differing framebuffer
	// sizes); ErrNotSupported on a GPU without it or with MIG on.
	MixedSize(gpu pci.Address) (bool, error)
	// SetMixedSize sets it: ErrInUse while any vGPU exists on the GPU,
	// ErrNotSupported as MixedSize. sriov-manage's rebind, a GPU reset and
	// a driver reload turn it off.
	SetMixedSize(gpu pci.Address, on bool) error
	// Virtualization is what the driver says of the GPU's virtualization
	// (nvmlDeviceGetVirtualizationMode, nvmlDeviceGetHostVgpuMode).
	Virtualization(gpu pci.Address) (Virt, error)
}

// Sizes is a GPU's memory as NVML states it, in MiB: less than the
// board's nominal size, and each instance less than its profile's name
// says (an H200's total is 143771, its 1g.18gb 16384).
type Sizes struct {
	TotalMB  uint64      `json:"totalMB"`
	Profiles []GIProfile `json:"profiles,omitempty"`
}

// GIProfile is a GPU instance profile (nvmlDeviceGetGpuInstanceProfileInfo):
// its id as nvidia-smi mig -lgip shows it, its memory, SM slices and how
// many instances of it fit.
type GIProfile struct {
	ID       int    `json:"id"`
	MemoryMB uint64 `json:"memoryMB"`
	Slices   int    `json:"slices"`
	Count    int    `json:"count"`
}

// Virtualization modes, NVML_GPU_VIRTUALIZATION_MODE_* in order from 0.
const (
	VirtNone        = "none"        // bare metal
	VirtPassthrough = "passthrough" // this OS is a guest the GPU is passed through to
	VirtVGPU        = "vgpu"        // a vGPU in a guest
	VirtHostVGPU    = "host-vgpu"   // NVIDIA's vGPU host driver
	VirtHostVSGA    = "host-vsga"   // a VMware vSGA host
)

// Host vGPU modes, NVML_HOST_VGPU_MODE_*.
const (
	HostVGPUNonSRIOV = "non-sriov"
	HostVGPUSRIOV    = "sriov"
)

// Virt is a GPU's virtualization as NVML reports it.
type Virt struct {
	Mode string `json:"mode"`
	// HostVGPU is the vGPU host driver's mode; "" where NVML has none
	// (NOT_SUPPORTED: a driver other than the vGPU host driver).
	HostVGPU string `json:"hostVGPU,omitempty"`
}

// Guest reports a GPU that this OS holds as a VM's guest.
func (v Virt) Guest() bool { return v.Mode == VirtPassthrough || v.Mode == VirtVGPU }

// VGPUType is a vGPU type as NVML numbers and names it.
type VGPUType struct {
	ID   int
	Name string
}

// Scheduler policies, as NVML numbers them (NVML_VGPU_SCHEDULER_POLICY_*).
const (
	PolicyBestEffort = 1
	PolicyEqualShare = 2
	PolicyFixedShare = 3
)

// Adaptive round robin modes (NVML_VGPU_SCHEDULER_ARR_*).
const (
	ARRDefault = 0
	ARRDisable = 1
	ARREnable  = 2
)

// Sched is a GPU's vGPU scheduler: the policy, and for equal and fixed
// share either strict round robin with a time slice (ARR disabled) or
// adaptive round robin with its averaging factor and frequency. Zero
// values are the driver's defaults.
type Sched struct {
	Policy      int    `json:"policy"`
	ARR         int    `json:"arr"`
	TimesliceNS uint32 `json:"timesliceNS,omitempty"`
	AvgFactor   uint32 `json:"avgFactor,omitempty"`
	FrequencyHz uint32 `json:"frequencyHz,omitempty"`
}
