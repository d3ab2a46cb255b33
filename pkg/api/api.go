package api

import (
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Version is the API version, the first element of every path.
const Version = "v1"

// DefaultSocket is where vgpud listens.
const DefaultSocket = "/run/vgpud/vgpud.sock"

// MaxBodyBytes bounds a request body; larger ones get 413.
const MaxBodyBytes = 1 << 20

// MaxTTLSeconds bounds a lease (a day): an incoming migration that takes
// longer has failed.
const MaxTTLSeconds = 24 * 60 * 60

// Routes without a domain.
const (
	PathHealth      = "/v1/health"      // GET: Health
	PathGPUs        = "/v1/gpus"        // GET: []GPU
	PathVGPUs       = "/v1/vgpus"       // GET: []VGPU, with a Warning header when some vGPUs' use is unknown
	PathAllocations = "/v1/allocations" // GET: Holdings
	PathConfig      = "/v1/config"      // GET: Config
	PathReconcile   = "/v1/reconcile"   // POST: ReconcileReport
	PathApply       = "/v1/apply"       // POST ApplyRequest: ReconcileReport
	PathAssert      = "/v1/assert"      // GET (the running config) or POST AssertRequest: AssertReport
	PathCarve       = "/v1/carve"       // POST CarveRequest: CarveResult
	PathUncarve     = "/v1/uncarve"     // POST UncarveRequest: CarveResult
	PathMetrics     = "/metrics"        // GET: Prometheus text
)

func domainPath(uuid, what string) string {
	return "/v1/domains/" + url.PathEscape(uuid) + "/" + what
}

// ReservationsPath is POST ReserveRequest -> Holdings (reserve) and
// DELETE [?vgpu=ID] -> Holdings, what was freed (unreserve).
func ReservationsPath(domainUUID string) string { return domainPath(domainUUID, "reservations") }

// PreparePath is POST PrepareRequest -> Holdings.
func PreparePath(domainUUID string) string { return domainPath(domainUUID, "prepare") }

// ReleasePath is POST ReleaseRequest -> ReleaseResult.
func ReleasePath(domainUUID string) string { return domainPath(domainUUID, "release") }

// LeasesPath is POST LeaseRequest -> Holdings and DELETE -> Holdings, the
// leases dropped.
func LeasesPath(domainUUID string) string { return domainPath(domainUUID, "leases") }

// FreePath is POST FreeRequest -> Holdings, what was freed (vgpuctl
// release).
func FreePath(domainUUID string) string { return domainPath(domainUUID, "free") }

// MigrationPath is POST MigrationRequest -> Holdings, what changed
// (vgpuctl migrate, on the source).
func MigrationPath(domainUUID string) string { return domainPath(domainUUID, "migration") }

// Phases of MigrationRequest.
const (
	MigrationBegin    = "begin"    // attached -> migrating
	MigrationCommit   = "commit"   // the domain left: everything freed
	MigrationRollback = "rollback" // migrating -> attached: the VM runs here
)

// MigrationRequest moves the source's record of a domain migrating out.
type MigrationRequest struct {
	Phase string `json:"phase"`
}

// Error kinds: what a client branches on (pkg/client maps them to
// sentinel errors).
const (
	KindBadRequest = "bad-request" // 400, 413, 415: fix the request
	KindNotFound   = "not-found"   // 404: no such GPU, vGPU, route
	KindInUse      = "in-use"      // 409: it would destroy or free a vGPU a VM holds, or pass through what the host uses (force)
	KindNoCapacity = "no-capacity" // 409: not enough free vGPUs of the profile
	KindConflict   = "conflict"    // 409: held by another domain, or more than asked
	KindPartial    = "partial"     // 500: a step failed and so did its undo
	KindInternal   = "internal"    // 500
	KindStopping   = "stopping"    // 503: vgpud is shutting down
	KindForbidden  = "forbidden"   // 403: the caller may only read (root or socket.admin-group change)
	KindPending    = "pending"     // 202: a forced change still waits for a VM to let go; it goes on in vgpud
	// 429: the caller's uid has as many connections open to vgpud as one
	// user may; its new ones are refused until some close.
	KindTooMany = "too-many-connections"
	KindBusy    = "busy" // 503: too many connections wait to be served; try again
	// 499, in vgpud's log and metrics only: the client hung up before the
	// change began, and nothing was changed for it.
	KindClientGone = "client-gone"
)

// Error is the body of every error answer.
type Error struct {
	Error string `json:"error"`
	// Field names the request field at fault ("profile", "vgpus[1]").
	Field string `json:"field,omitempty"`
	Kind  string `json:"kind"`
	// Blocked lists the vGPUs in use that refused a carve or uncarve.
	Blocked []Blocker `json:"blocked,omitempty"`
}

// Health answers GET /v1/health.
type Health struct {
	Status  string `json:"status"` // "ok"
	Version string `json:"version"`
	PID     int    `json:"pid"`
	Config  string `json:"config"` // the config file's path
	// ConfigLoaded is false when no file was there: no GPU is managed.
	ConfigLoaded bool `json:"configLoaded"`
	// ConfigGeneration is the generation of the config in force: 1 for the
	// one read at start, one more for each apply or reload since.
	ConfigGeneration uint64    `json:"configGeneration"`
	Ledger           string    `json:"ledger"`
	Started          time.Time `json:"started"`
	LastReconcile    time.Time `json:"lastReconcile,omitzero"`
	// Drift counts the GPUs not as the config wants after the last reconcile.
	Drift int `json:"drift"`
}

// ReserveRequest asks for Count vGPUs of Profile for a domain whose VM is
// not running yet (vgpuctl attach). Idempotent: what the domain holds of
// the profile counts towards Count.
type ReserveRequest struct {
	Name    string `json:"name"`
	Profile string `json:"profile"`
	Count   int    `json:"count"`
	// NUMANode, when set, takes vGPUs on that node only.
	NUMANode *int `json:"numaNode,omitempty"`
}

// PrepareRequest makes the vGPUs a domain XML names ready for its VM and
// marks them attached (hook prepare/begin). VGPUs are the ids in the XML:
// VF addresses, or mdev UUIDs that may not exist yet. Count 0 means
// len(VGPUs).
type PrepareRequest struct {
	Name    string   `json:"name"`
	Profile string   `json:"profile"`
	Count   int      `json:"count,omitempty"`
	VGPUs   []string `json:"vgpus"`
}

// ReleaseRequest says the domain's VM stopped (hook release/end). The
// policy is the host config's onRelease.
type ReleaseRequest struct {
	Name string `json:"name,omitempty"`
}

// LeaseRequest holds vGPUs for a domain migrating in (hook migrate/begin).
type LeaseRequest struct {
	Name       string `json:"name"`
	Profile    string `json:"profile"`
	Count      int    `json:"count"`
	TTLSeconds int    `json:"ttlSeconds"`
	NUMANode   *int   `json:"numaNode,omitempty"`
	// DryRun answers with the leases it would take and takes none.
	DryRun bool `json:"dryRun,omitempty"`
}

// FreeRequest frees everything a domain holds (vgpuctl release). Without
// Force it is refused while the domain runs.
type FreeRequest struct {
	Force bool `json:"force,omitempty"`
}

// Allocation is one vGPU given to one domain.
type Allocation struct {
	VGPU       string    `json:"vgpu"`
	Kind       string    `json:"kind,omitempty"` // "" when the vGPU is not on the host now
	GPU        string    `json:"gpu"`
	Profile    string    `json:"profile"`
	DomainUUID string    `json:"domainUUID"`
	DomainName string    `json:"domainName"`
	State      string    `json:"state"` // reserved, attached, releasing
	Since      time.Time `json:"since"`
	// Pod is set when a pod's container holds the vGPU (the kubelet's
	// device plugin); DomainUUID is then the kubelet allocation's id.
	Pod *Pod `json:"pod,omitempty"`
}

// Pod is the pod's container the kubelet allocated a vGPU to.
type Pod struct {
	// Resource is the extended resource it was allocated under.
	Resource string `json:"resource"`
	// Namespace, Name and Container: "" until the kubelet's PodResources
	// lists the pod.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Container string `json:"container,omitempty"`
}

// PodGrant is what a pod's container was given: its allocations (one
// kubelet allocation, attached) and the device nodes its VM's QEMU opens
// (/dev/vfio/vfio, /dev/vfio/<group>, /dev/iommu), those the host has as
// character devices.
type PodGrant struct {
	Allocations []Allocation `json:"allocations"`
	DeviceNodes []string     `json:"deviceNodes"`
}

// Lease is one vGPU held for a domain migrating in.
type Lease struct {
	VGPU       string    `json:"vgpu"`
	Kind       string    `json:"kind,omitempty"`
	GPU        string    `json:"gpu"`
	Profile    string    `json:"profile"`
	DomainUUID string    `json:"domainUUID"`
	DomainName string    `json:"domainName"`
	Expires    time.Time `json:"expires"`
}

// Holdings are allocations and leases: of one domain (domain routes) or of
// the host (GET /v1/allocations).
type Holdings struct {
	Allocations []Allocation `json:"allocations"`
	Leases      []Lease      `json:"leases"`
}

// ReleaseResult says what a release did under Policy.
type ReleaseResult struct {
	Policy string `json:"policy"` // keep or destroy
	// Kept: allocations the domain keeps, now reserved.
	Kept []Allocation `json:"kept"`
	// Destroyed: mdevs removed; their allocations are gone.
	Destroyed []string `json:"destroyed,omitempty"`
	// Cleared: NVIDIA VFs whose vGPU type was cleared (still reserved).
	Cleared []string `json:"cleared,omitempty"`
	// Reconcile reports the carve that made the GPUs' pools whole again.
	Reconcile *ReconcileReport `json:"reconcile,omitempty"`
}

// HeaderWarning carries, on a listing, what the listing could not tell
// (RFC 9110's Warning field, code 299): "299 vgpud \"the open files of 1
// process could not be read: ...\"".
const HeaderWarning = "Warning"

// Warning is text as a HeaderWarning value.
func Warning(text string) string { return "299 vgpud " + strconv.Quote(text) }

// ParseWarning is the text of a HeaderWarning value; "" when it is none.
func ParseWarning(v string) string {
	q, ok := strings.CutPrefix(v, "299 vgpud ")
	if !ok {
		return ""
	}
	text, err := strconv.Unquote(q)
	if err != nil {
		return ""
	}
	return text
}

// VGPU is one vGPU of the host with who holds it.
type VGPU struct {
	ID         string `json:"id"` // device address, or the mdev UUID
	GPU        string `json:"gpu"`
	Kind       string `json:"kind"`             // vf, mdev, nvidia-vf or pf
	Parent     string `json:"parent,omitempty"` // mdev parent / VF's PF
	Type       string `json:"type,omitempty"`   // mdev type id or NVIDIA type name
	Profile    string `json:"profile,omitempty"`
	IOMMUGroup int    `json:"iommuGroup"`
	Driver     string `json:"driver,omitempty"`
	InUse      bool   `json:"inUse"`
	// UseUnknown: nobody visible holds the vGPU, but a process whose open
	// files could not be read may: a change that would destroy it is
	// refused unless forced.
	UseUnknown bool   `json:"useUnknown,omitempty"`
	Holder     string `json:"holder,omitempty"`
	NUMANode   int    `json:"numaNode"`
	// VendorDriver is the driver of the GPU (or the virtual mdev parent's
	// module) the vGPU is carved on; DriverVersion its module version ("":
	// none). A migration's destination must match the source's.
	VendorDriver  string `json:"vendorDriver,omitempty"`
	DriverVersion string `json:"driverVersion,omitempty"`
	// State is free, reserved, attached, releasing or leased.
	State      string    `json:"state"`
	DomainUUID string    `json:"domainUUID,omitempty"`
	DomainName string    `json:"domainName,omitempty"`
	Since      time.Time `json:"since,omitzero"`
	Expires    time.Time `json:"expires,omitzero"`
	// Pod is set when a pod's container holds it (Allocation.Pod).
	Pod *Pod `json:"pod,omitempty"`
}

// States of a VGPU besides the ledger's allocation states.
const (
	StateFree   = "free"
	StateLeased = "leased"
)

// GPU is one GPU with the profile it carries and the one the config wants.
type GPU struct {
	Address    string `json:"address"` // PCI address: 0000:03:00.0
	VendorID   uint16 `json:"vendorID"`
	DeviceID   uint16 `json:"deviceID"`
	VendorName string `json:"vendorName"` // from pci.ids; hex id when unknown
	DeviceName string `json:"deviceName"`
	Class      uint32 `json:"class"`
	NUMANode   int    `json:"numaNode"`   // -1 when the host has no NUMA
	IOMMUGroup int    `json:"iommuGroup"` // -1 when there is no IOMMU group
	Driver     string `json:"driver"`     // "" when unbound
	// FramebufferMB is the GPU's memory where the hardware says it; 0
	// unknown.
	FramebufferMB uint64 `json:"framebufferMB,omitempty"`
	// Dialects this host can carve the GPU in now (sriov, mdev,
	// sriov-mdev, nvidia-vf, passthrough), most specific first.
	Dialects []string `json:"dialects"`
	// Unavailable lists the dialects the GPU would speak that cannot be
	// carved here now, each with its reason.
	Unavailable []Unavailable `json:"unavailable,omitempty"`
	// BootVGA: the firmware used the GPU as the boot display; a
	// passthrough takes it only when forced.
	BootVGA bool `json:"bootVGA,omitempty"`
	// NVIDIADriver is the loaded nvidia module, for NVIDIA's GPUs.
	NVIDIADriver *NVIDIADriver `json:"nvidiaDriver,omitempty"`
	// Guest says what shows this OS to be a virtual machine's guest; ""
	// when nothing does.
	Guest     string     `json:"guest,omitempty"`
	SRIOV     *SRIOV     `json:"sriov,omitempty"`
	MdevTypes []MdevType `json:"mdevTypes,omitempty"` // types offered by the PF itself
	// Peers share the GPU's IOMMU group (vgpud's listing leaves them out).
	Peers []Peer `json:"peers,omitempty"`
	// GIM is what old AMD GIM runs with, for a GPU it drives.
	GIM *GIMState `json:"gim,omitempty"`
	// Xe is Intel xe's sriov_admin/ view of the GPU.
	Xe *XeAdmin `json:"xe,omitempty"`
	// NVIDIATypes are the vGPU types NVIDIA's NVML says the GPU supports.
	NVIDIATypes []VGPUType `json:"nvidiaTypes,omitempty"`
	// MIGProfiles are the GPU's GPU instance profiles as NVML states them.
	MIGProfiles []MIGProfile `json:"migProfiles,omitempty"`

	Profile string `json:"profile,omitempty"` // what it carries now; "" none
	Desired string `json:"desired,omitempty"` // what the config wants; "" not managed
}

// Unavailable is a dialect the GPU would speak that this host cannot carve
// now, and why.
type Unavailable struct {
	Dialect string `json:"dialect"`
	Reason  string `json:"reason"`
}

// NVIDIADriver is the nvidia module a host runs.
type NVIDIADriver struct {
	Version string `json:"version"` // "" when the module does not say
	// VGPUHost: NVIDIA's vGPU host driver (nvidia_vgpu_vfio is loaded).
	VGPUHost bool `json:"vgpuHost"`
}

// SRIOV is a PF's SR-IOV capability and current VFs.
type SRIOV struct {
	TotalVFs   int    `json:"totalVFs"`
	NumVFs     int    `json:"numVFs"`
	VFDeviceID uint16 `json:"vfDeviceID"`
	VFs        []VF   `json:"vfs,omitempty"`
}

// VF is one enabled virtual function.
type VF struct {
	Index      int    `json:"index"` // N of virtfnN
	Address    string `json:"address"`
	Driver     string `json:"driver"`
	IOMMUGroup int    `json:"iommuGroup"`
	// MdevTypes when the VF is an mdev parent.
	MdevTypes []MdevType `json:"mdevTypes,omitempty"`
	// NVIDIA per-VF types (vGPU 17+); nil when the VF has no nvidia/ dir.
	NVIDIA *NVIDIAVF `json:"nvidia,omitempty"`
}

// MdevType is one entry of mdev_supported_types.
type MdevType struct {
	ID                 string   `json:"id"`   // directory name: "nvidia-222"
	Name               string   `json:"name"` // "GRID T4-4Q"; the id when the kernel has no name
	Description        string   `json:"description,omitempty"`
	DeviceAPI          string   `json:"deviceAPI"`
	AvailableInstances int      `json:"availableInstances"`
	MaxInstances       int      `json:"maxInstances,omitempty"`
	FramebufferMB      uint64   `json:"framebufferMB,omitempty"`
	Instances          []string `json:"instances,omitempty"` // mdev UUIDs
}

// NVIDIAVF is a VF's nvidia/ directory.
type NVIDIAVF struct {
	Creatable   []VGPUType `json:"creatable"`
	CurrentType int        `json:"currentType"` // 0 when none
}

// VGPUType is an NVIDIA vGPU type.
type VGPUType struct {
	ID   int    `json:"id"`
	Name string `json:"name"` // "NVIDIA L40S-12Q"
}

// Peer is a device in the GPU's IOMMU group.
type Peer struct {
	Address  string `json:"address"`
	Class    uint32 `json:"class"`
	Driver   string `json:"driver"` // "" unbound
	Original string `json:"original,omitempty"`
}

// GIMState is what old AMD GIM runs with.
type GIMState struct {
	VFNum           int `json:"vfNum"`           // 0: every VF
	SchedOption     int `json:"schedOption"`     // 0 round robin solid, 1 predictable performance, 2 round robin liquid
	SchedIntervalMS int `json:"schedIntervalMS"` // 0: GIM's default (6 ms)
}

// XeAdmin is Intel xe's scheduling of each enabled VF, VFs[i] for VF i,
// and the priority all VFs share.
type XeAdmin struct {
	Priority string    `json:"priority"`
	VFs      []XeSched `json:"vfs"`
	// Quota: the kernel has vram_quota; Quotas is then each enabled VF's,
	// in bytes.
	Quota  bool     `json:"vramQuota,omitempty"`
	Quotas []uint64 `json:"vramQuotas,omitempty"`
	// VFIODriver is xe-vfio-pci when it is loaded.
	VFIODriver string `json:"vfioDriver,omitempty"`
}

// XeSched is one xe function's scheduling profile.
type XeSched struct {
	ExecQuantumMS    uint32 `json:"execQuantumMS"`
	PreemptTimeoutUS uint32 `json:"preemptTimeoutUS"`
	Priority         string `json:"priority"`
}

// MIGProfile is a GPU instance profile: its id as nvidia-smi mig -lgip
// shows it, its memory in MiB, SM slices and how many instances fit.
type MIGProfile struct {
	ID       int    `json:"id"`
	MemoryMB uint64 `json:"memoryMB"`
	Slices   int    `json:"slices"`
	Count    int    `json:"count"`
}

// CarveRequest carves GPU, or the virtual mdev parent named Parent
// (mbochs), with Profile (vgpuctl carve). One of GPU and Parent is set.
type CarveRequest struct {
	GPU     string `json:"gpu,omitempty"`
	Parent  string `json:"parent,omitempty"`
	Profile string `json:"profile"`
	Force   bool   `json:"force,omitempty"`
	DryRun  bool   `json:"dryRun,omitempty"`
}

// UncarveRequest removes every vGPU of GPU or of the virtual mdev parent
// Parent (vgpuctl uncarve).
type UncarveRequest struct {
	GPU    string `json:"gpu,omitempty"`
	Parent string `json:"parent,omitempty"`
	Force  bool   `json:"force,omitempty"`
	DryRun bool   `json:"dryRun,omitempty"`
}

// CarveResult is a carve's plan and how many of its ops ran.
type CarveResult struct {
	Plan    Plan `json:"plan"`
	Applied int  `json:"applied"` // ops carried out
	DryRun  bool `json:"dryRun"`
}

// Plan is what a carve or uncarve of one GPU, or of one virtual mdev
// parent, would change.
type Plan struct {
	GPU     string `json:"gpu"`               // the GPU's PCI address; 0000:00:00.0 for a parent
	Parent  string `json:"parent,omitempty"`  // the virtual mdev parent; "" for a GPU
	Profile string `json:"profile,omitempty"` // "" for an uncarve
	Ops     []Op   `json:"ops"`
	// Blocked lists the vGPUs in use, or of unknown use, that the plan
	// would destroy.
	Blocked []Blocker `json:"blocked,omitempty"`
}

// Op is one kernel change of a plan. Kind says which (driver, numvfs,
// mdev-create, mdev-remove, nvidia-type, ...) and which fields it uses; a
// device op names the device (Device) or VF index VF of PF Device.
type Op struct {
	Kind     string  `json:"kind"`
	Device   string  `json:"device,omitempty"` // PCI address
	VF       *int    `json:"vf,omitempty"`
	To       string  `json:"to,omitempty"`
	Count    int     `json:"count,omitempty"`
	Override *string `json:"override,omitempty"`
	Parent   string  `json:"parent,omitempty"`
	Type     string  `json:"type,omitempty"`
	UUID     string  `json:"uuid,omitempty"`
	Start    *int    `json:"start,omitempty"`
	// Instance is the GPU instance a gpu-instance-destroy removes.
	Instance *GPUInstance `json:"instance,omitempty"`
	Keep     []int        `json:"keep,omitempty"`
	// Sched is an nvidia-scheduler op's scheduler.
	Sched     *Sched   `json:"sched,omitempty"`
	Params    []string `json:"params,omitempty"`
	Destroys  string   `json:"destroys,omitempty"` // the vGPU the op tears down
	Autoprobe *bool    `json:"autoprobe,omitempty"`
	Attr      string   `json:"attr,omitempty"`
	Value     string   `json:"value,omitempty"`
	Bulk      bool     `json:"bulk,omitempty"`
}

// GPUInstance is an NVIDIA MIG GPU instance: its id, its profile's id as
// nvidia-smi mig -lgip shows it, and its placement in memory slices.
type GPUInstance struct {
	ID        int `json:"id"`
	ProfileID int `json:"profileID"`
	Start     int `json:"start"`
	Size      int `json:"size"`
}

// Sched is an NVIDIA GPU's vGPU scheduler (NVML's policy and adaptive
// round robin values; zero values are the driver's defaults).
type Sched struct {
	Policy      int    `json:"policy"`
	ARR         int    `json:"arr"`
	TimesliceNS uint32 `json:"timesliceNS,omitempty"`
	AvgFactor   uint32 `json:"avgFactor,omitempty"`
	FrequencyHz uint32 `json:"frequencyHz,omitempty"`
}

// Blocker is a vGPU in use (or of unknown use) that a change would
// destroy.
type Blocker struct {
	VGPU   string `json:"vgpu"`
	Holder string `json:"holder"`
	// Unknown: nobody visible holds the vGPU, but its use cannot be told;
	// Holder says why.
	Unknown bool `json:"unknown,omitempty"`
}

// Config is the host config in force (GET /v1/config), as
// /etc/vgpud/config.yaml gives it (docs/config.md).
type Config struct {
	Path      string        `json:"path,omitempty"` // the file it was read from
	Version   string        `json:"version"`
	GPUs      []ConfigEntry `json:"gpus,omitempty"`
	Socket    ConfigSocket  `json:"socket"`
	OnRelease string        `json:"onRelease"` // keep or destroy
	Metrics   ConfigMetrics `json:"metrics"`
	// Kubernetes is vgpud's device plugin for the kubelet.
	Kubernetes ConfigKubernetes `json:"kubernetes"`
}

// ConfigEntry is one item of a config's gpus: a selector (one of Address,
// ID, All, Parent) and the profile what it selects carries.
type ConfigEntry struct {
	Address string `json:"address,omitempty"` // PCI address
	ID      string `json:"id,omitempty"`      // vendor:device, e.g. 10de:26b9
	All     bool   `json:"all,omitempty"`
	Parent  string `json:"parent,omitempty"`
	Profile string `json:"profile"`
	// MdevUUIDs are the UUIDs pinned to the first mdevs of the entry's pool.
	MdevUUIDs []string `json:"mdevUUIDs,omitempty"`
}

// ConfigSocket is a config's socket section.
type ConfigSocket struct {
	Group      string `json:"group"`
	AdminGroup string `json:"adminGroup,omitempty"`
}

// ConfigMetrics is a config's metrics section.
type ConfigMetrics struct {
	Listen string `json:"listen,omitempty"`
}

// ConfigKubernetes is a config's kubernetes section: the kubelet device
// plugin (docs/kubevirt.md).
type ConfigKubernetes struct {
	DevicePlugin        bool   `json:"devicePlugin"`
	ResourceDomain      string `json:"resourceDomain,omitempty"`
	NVIDIAResourceNames bool   `json:"nvidiaResourceNames,omitempty"`
	DevicePluginDir     string `json:"devicePluginDir"`
	PodResourcesSocket  string `json:"podResourcesSocket"`
}

// ApplyRequest replaces the host config with Config (YAML) and reconciles.
// With DryRun the config is validated against the host and nothing is
// written.
type ApplyRequest struct {
	Config string `json:"config"`
	DryRun bool   `json:"dryRun,omitempty"`
	// Source names the file the client read Config from, for messages
	// ("new.yaml:4: ..."); vgpud still writes the config to its own path.
	Source string `json:"source,omitempty"`
}

// AssertRequest compares the host with Config (YAML) without changing it.
type AssertRequest struct {
	Config string `json:"config"`
	Source string `json:"source,omitempty"` // as in ApplyRequest
}

// GPUReport is what a reconcile did to one GPU.
type GPUReport struct {
	GPU string `json:"gpu"`
	// Profile wanted; "" for an uncarve (the config no longer names it).
	Profile string `json:"profile,omitempty"`
	Action  string `json:"action"` // carve or uncarve
	// Ops applied, in order; empty when the GPU was already as wanted.
	Ops []string `json:"ops,omitempty"`
	// Refused lists the vGPUs in use that stopped the change.
	Refused []Blocker `json:"refused,omitempty"`
	// Restored lists allocated mdev identities made again.
	Restored []string `json:"restored,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// Changed reports whether the kernel was changed for this GPU.
func (r GPUReport) Changed() bool { return len(r.Ops) > 0 || len(r.Restored) > 0 }

// ReconcileReport is what one reconcile did.
type ReconcileReport struct {
	Reason string `json:"reason"` // start, sighup, apply, api, release
	Config string `json:"config"`
	// Generation counts the configs vgpud put in force since it started
	// (apply and reload); 0 when this reconcile put none in force.
	Generation uint64      `json:"generation,omitempty"`
	Started    time.Time   `json:"started"`
	Duration   string      `json:"duration"`
	GPUs       []GPUReport `json:"gpus"`
	Changed    int         `json:"changed"`
	Refused    int         `json:"refused"`
	Failed     int         `json:"failed"`
	// Drift counts GPUs not as wanted afterwards (refused or failed).
	Drift int `json:"drift"`
	// Error is set when the config could not be applied at all (it does not
	// fit this host); nothing was changed then.
	Error string `json:"error,omitempty"`
	// Repaired lists the open intents found at start and what became of
	// them, and the VF driver autoprobe a change cut short left turned and
	// the reconcile put back.
	Repaired []string `json:"repaired,omitempty"`
}

// OK reports whether the reconcile left the host as the config wants.
func (r ReconcileReport) OK() bool { return r.Error == "" && r.Refused == 0 && r.Failed == 0 }

// Drift is one GPU that differs from the config.
type Drift struct {
	GPU     string `json:"gpu"`
	Desired string `json:"desired"` // "" when it should carry nothing
	Actual  string `json:"actual"`  // "" when it carries no profile
	// Ops a reconcile would apply.
	Ops []string `json:"ops,omitempty"`
	// Blocked lists the vGPUs in use the change would destroy.
	Blocked []Blocker `json:"blocked,omitempty"`
	Error   string    `json:"error,omitempty"`
}

// Missing is an allocation whose vGPU is not on the host.
type Missing struct {
	Allocation
}

// AssertReport compares the host with a config.
type AssertReport struct {
	Config  string    `json:"config"`
	Match   bool      `json:"match"`
	GPUs    []Drift   `json:"gpus"`
	Missing []Missing `json:"missing"`
	Error   string    `json:"error,omitempty"`
}

// MIGProfile returns the GPU instance profile of id, if NVML stated it.
func (g GPU) MIGProfile(id int) (MIGProfile, bool) {
	for _, p := range g.MIGProfiles {
		if p.ID == id {
			return p, true
		}
	}
	return MIGProfile{}, false
}
