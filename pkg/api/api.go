// Package api is vgpud's wire format, version 1: the routes of its HTTP/JSON
// API on a unix socket and the types they take and return. It holds no
// logic, so the libvirt hook can link it (through pkg/client) without the
// ledger.
//
// Every error answer is an Error with a 4xx or 5xx status. Requests are
// validated before vgpud changes anything: a 4xx means nothing was written.
package api

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
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
	PathConfig      = "/v1/config"      // GET: config.Config
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
	Blocked []vgpu.Blocker `json:"blocked,omitempty"`
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
	Kind       vgpu.Kind `json:"kind,omitempty"` // "" when the vGPU is not on the host now
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
	Kind       vgpu.Kind `json:"kind,omitempty"`
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
	vgpu.VGPU
	NUMANode int `json:"numaNode"`
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
	inventory.GPU
	Profile string `json:"profile,omitempty"` // what it carries now; "" none
	Desired string `json:"desired,omitempty"` // what the config wants; "" not managed
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
	carve.Result
	DryRun bool `json:"dryRun"`
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
	Refused []vgpu.Blocker `json:"refused,omitempty"`
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
	Blocked []vgpu.Blocker `json:"blocked,omitempty"`
	Error   string         `json:"error,omitempty"`
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
