package profile

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/internal/strictyaml"
	"github.com/vgpu-project/vgpu/pkg/inventory"
)

// Version is the only catalog schema version this package reads.
const Version = "v1"

// MaxSplit is the most vGPUs one GPU is cut into (docs/profiles.md,
// "Dialects and their splits").
const MaxSplit = 16

// File is one catalog file: one GPU model and its profiles.
type File struct {
	// Path names the file in messages ("profiles/mi25.yaml").
	Path     string `json:"path"`
	Version  string `json:"version"`
	Model    Model  `json:"model"`
	Profiles []Spec `json:"profiles"`

	// lines maps field paths ("profiles[2].split") to their line; nil when
	// the File was built in code rather than decoded.
	lines map[string]int
}

// Model is the GPU model a file describes: PCI functions by vendor and
// device ids, or one virtual mdev parent by name.
type Model struct {
	Name      string   `json:"name"` // "NVIDIA Tesla T4"
	VendorID  uint16   `json:"vendorID,omitempty"`
	DeviceIDs []uint16 `json:"deviceIDs,omitempty"`
	// MdevParent names a virtual mdev parent (/sys/class/mdev_bus/<name>
	// with no PCI device behind it, such as the kernel's mbochs sample);
	// such a model has no PCI ids and the mdev dialect only.
	MdevParent string `json:"mdevParent,omitempty"`
	// AnyGPU: the model is every GPU physical function, whatever its ids
	// (the built-in passthrough profile's).
	AnyGPU bool `json:"anyGPU,omitempty"`
	// Dialect is how the model is split (docs/profiles.md, "Dialects
	// and their splits").
	Dialect inventory.Dialect `json:"dialect"`
	// FramebufferMB of the whole GPU; 0 when it has none of its own (GVT-g).
	FramebufferMB uint64 `json:"framebufferMB,omitempty"`
	// Migration says how the model's vGPUs live-migrate; nil: they do not
	// (no VFIO migration driver for them).
	Migration *Migration `json:"migration,omitempty"`
	// Source says where the file's types, ids and sizes come from.
	Source string `json:"source,omitempty"`
}

// Migration is how a model's vendor driver migrates a vGPU's state
// (docs/migration.md, "Requirements").
type Migration struct {
	// StopCopyMB is the device state moved while the guest is stopped,
	// per vGPU; StopCopyFramebuffer means the vGPU's whole framebuffer
	// (a driver without precopy: NVIDIA, Intel xe).
	StopCopyMB          uint64 `json:"stopCopyMB,omitempty"`
	StopCopyFramebuffer bool   `json:"stopCopyFramebuffer,omitempty"`
	// NoPause: the driver cannot migrate a paused guest (NVIDIA).
	NoPause bool `json:"noPause,omitempty"`
	// DirtyTracking is how QEMU learns which guest pages the device wrote:
	// device (DMA logging), iommu (IOMMUFD dirty tracking) or none (every
	// pinned page counts as dirty).
	DirtyTracking string `json:"dirtyTracking"`
}

// StopCopyBytes is the device state one vGPU of p moves at stop-copy.
func (p Profile) StopCopyBytes() uint64 {
	m := p.Model.Migration
	if m == nil {
		return 0
	}
	if m.StopCopyFramebuffer {
		return p.FramebufferMB() << 20
	}
	return m.StopCopyMB << 20
}

// Spec is one entry of a file's profiles list, as written.
type Spec struct {
	Name        string `json:"name"`
	Split       int    `json:"split"`
	Description string `json:"description,omitempty"`
	// Mdev is the backend selector of the mdev and sriov-mdev dialects.
	Mdev MdevType `json:"mdevType,omitzero"`
	// NVIDIA is the backend selector of the nvidia-vf dialect.
	NVIDIA NVIDIAType `json:"nvidiaType,omitzero"`
	// GIM is old AMD GIM's scheduler for the sriov dialect; nil means
	// GIM's defaults (round-robin-solid, its default time slice).
	GIM *GIMOptions `json:"gim,omitempty"`
	// Xe is Intel xe's scheduling profile for each VF, for the sriov
	// dialect on a GPU xe drives; nil leaves xe's defaults.
	Xe *XeOptions `json:"xe,omitempty"`
	// GPUInstance, on an NVIDIA per-VF type (dialect nvidia-vf), makes the
	// profile MIG-backed: each vGPU runs on a GPU instance of this profile.
	GPUInstance *GPUInstance `json:"gpuInstance,omitempty"`
	// Scheduler is NVIDIA's time-sliced vGPU scheduler for the GPU, set by
	// NVML before its vGPUs are made; nil leaves the driver's.
	Scheduler *NVScheduler `json:"nvidiaScheduler,omitempty"`
	// MixedSize puts the GPU in NVIDIA's mixed-size mode (NVML's vGPU
	// heterogeneous mode: time-sliced vGPUs of differing framebuffer sizes
	// on one GPU), set after sriov-manage -e and before the first vGPU,
	// since the driver clears it with every rebind and takes it only while
	// no vGPU exists (nvidia-vf only).
	MixedSize bool `json:"nvidiaMixedSize,omitempty"`
	// Params are NVIDIA's vGPU plugin parameters (frame-rate limiter and
	// the like), written to each vGPU's nvidia/vgpu_params before its VM
	// starts; in the order of NVIDIAParams.
	Params []VGPUParam `json:"vgpuParams,omitempty"`
}

// VGPUParam is one of NVIDIA's vgpu_params settings.
type VGPUParam struct {
	Name  string `json:"name"`
	Value int    `json:"value"`
}

// NVIDIAParams are the vgpu_params a profile may set, each 0 or 1 (NVIDIA
// AI Enterprise user guide, "Setting vGPU plugin parameters";
// docs/vendors/nvidia.md). vgpu-placement-id is left out: it differs vGPU by vGPU.
func NVIDIAParams() []string {
	return []string{"frame_rate_limiter", "disable_vnc", "enable_uvm", "enable_debugging", "enable_profiling"}
}

// ParamsLine is what goes into vgpu_params: "frame_rate_limiter=0,
// disable_vnc=1"; "" when the profile sets none.
func (s Spec) ParamsLine() string {
	parts := make([]string, len(s.Params))
	for i, p := range s.Params {
		parts[i] = fmt.Sprintf("%s=%d", p.Name, p.Value)
	}
	return strings.Join(parts, ", ")
}

// TakesVGPUParams: p's vGPUs are NVIDIA's, with a vgpu_params file (mdev
// types, or per-VF types).
func (p Profile) TakesVGPUParams() bool {
	return p.Model.VendorID == NVIDIAVendor && (usesMdev(p.Model.Dialect) || usesNVIDIA(p.Model.Dialect))
}

// NVIDIAVendor is NVIDIA's PCI vendor id.
const NVIDIAVendor = 0x10de

// GIMOptions are old AMD GIM's scheduler settings, the module parameters
// sched_option and sched_interval it takes when it loads
// (docs/vendors/amd.md; drv/gim_command.h).
type GIMOptions struct {
	// Scheduler is one of GIMSchedulers.
	Scheduler string `json:"scheduler"`
	// IntervalMS is the time slice; 0 is GIM's default (6 ms).
	IntervalMS int `json:"intervalMS,omitempty"`
}

// GIMSchedulers are sched_option's values, by index.
func GIMSchedulers() []string {
	return []string{"round-robin-solid", "predictable-performance", "round-robin-liquid"}
}

// GIMMaxIntervalMS is sched_interval's bound (SCHED_INTERVAL__MAX).
const GIMMaxIntervalMS = 2000

// SchedOption is the sched_option value of o (nil: GIM's default, 0).
func (o *GIMOptions) SchedOption() int {
	if o == nil {
		return 0
	}
	return max(slices.Index(GIMSchedulers(), o.Scheduler), 0)
}

// Interval is the sched_interval value of o (nil: 0, GIM's default).
func (o *GIMOptions) Interval() int {
	if o == nil {
		return 0
	}
	return o.IntervalMS
}

// NVScheduler is NVIDIA's vGPU scheduler (docs/vendors/nvidia.md): a policy, and
// for equal or fixed share strict round robin with a time slice, or
// adaptive round robin. NVML takes it only while no vGPU exists on the GPU,
// so a change re-creates the GPU's vGPUs; it lasts until the driver reloads.
type NVScheduler struct {
	// Policy is one of NVSchedulerPolicies.
	Policy string `json:"policy"`
	// TimesliceMS (1-30) makes the round robin strict with that slice;
	// 0 leaves the driver's (2 ms up to 8 vGPUs per GPU, else 1 ms).
	TimesliceMS int `json:"timesliceMS,omitempty"`
	// Adaptive turns adaptive round robin on, with the driver's averaging
	// factor and frequency.
	Adaptive bool `json:"adaptive,omitempty"`
}

// NVSchedulerPolicies are the policies, in NVML's order from 1.
func NVSchedulerPolicies() []string { return []string{"best-effort", "equal-share", "fixed-share"} }

// NVSchedulerMaxTimesliceMS bounds a time slice (RmPVMRL's TT field).
const NVSchedulerMaxTimesliceMS = 30

// String is the scheduler in one phrase: "equal-share, 2 ms slices".
func (s *NVScheduler) String() string {
	switch {
	case s == nil:
		return ""
	case s.Adaptive:
		return s.Policy + ", adaptive"
	case s.TimesliceMS > 0:
		return fmt.Sprintf("%s, %d ms slices", s.Policy, s.TimesliceMS)
	}
	return s.Policy
}

// variant tells apart profiles that share a type: their vgpu_params,
// scheduler and mixed-size mode.
func (s Spec) variant() string {
	return fmt.Sprint(s.ParamsLine(), "|", s.Scheduler.String(), "|", s.MixedSize)
}

// XeOptions are what Intel xe's sriov_admin/vfN/profile/ sets for each VF
// (Linux 6.19+; docs/vendors/intel.md). xe resets them when the VFs go, so a carve
// writes them every time it enables VFs.
type XeOptions struct {
	// ExecQuantumMS is the VF's execution quantum; 0 is unlimited.
	ExecQuantumMS uint32 `json:"execQuantumMS,omitempty"`
	// PreemptTimeoutUS is its preemption timeout; 0 is unlimited.
	PreemptTimeoutUS uint32 `json:"preemptTimeoutUS,omitempty"`
	// Priority is one of XePriorities ("" is low, xe's default). A VF's
	// priority changes only in bulk, for every function at once.
	Priority string `json:"priority,omitempty"`
	// VRAMQuota pins each VF's VRAM (vfN/profile/vram_quota, Linux 7.0+)
	// so that it is the same on every host, which VF migration needs:
	// "pinned" for the equal share of what the PF can give (XeVRAMQuota),
	// or a size ("3456MiB", "3GiB"). "" leaves xe's auto-provisioning.
	VRAMQuota string `json:"vramQuota,omitempty"`
}

// XeVRAMPinned is XeOptions.VRAMQuota's value for the equal share.
const XeVRAMPinned = "pinned"

// XePFReserveMB is the VRAM a pinned quota leaves the PF: the 128 MiB
// spare xe keeps (pf_get_min_spare_lmem) and its own objects, about 2.1
// GiB on a 16 GB Battlemage ("LMEM available(14096M)", docs/vendors/intel.md),
// with room to spare. vgpu's choice, not the driver's.
const XePFReserveMB = 2560

// ParseXeVRAMQuota reads XeOptions.VRAMQuota: pinned, or a size in MiB
// (0 when pinned or empty).
func ParseXeVRAMQuota(s string) (mb uint64, pinned bool, err error) {
	switch {
	case s == "":
		return 0, false, nil
	case s == XeVRAMPinned:
		return 0, true, nil
	}
	unit := uint64(1)
	num := strings.TrimSuffix(s, "MiB")
	if n, ok := strings.CutSuffix(s, "GiB"); ok {
		num, unit = n, 1024
	}
	v, err := strconv.ParseUint(num, 10, 32)
	if err != nil || num == s || v == 0 {
		return 0, false, fmt.Errorf("%s is neither %s nor a size like 3456MiB or 3GiB", strictyaml.Quote(s), XeVRAMPinned)
	}
	return v * unit, false, nil
}

// XeVRAMQuota is the vram_quota, in bytes, each VF of p gets: the size
// the profile names, or for "pinned" the equal share of the model's VRAM
// less XePFReserveMB, down to xe's 2 MiB granule; 0 when p pins none.
func (p Profile) XeVRAMQuota() uint64 {
	if p.Xe == nil || p.Split <= 0 {
		return 0
	}
	mb, pinned, err := ParseXeVRAMQuota(p.Xe.VRAMQuota)
	if err != nil {
		return 0
	}
	if pinned {
		if p.Model.FramebufferMB <= XePFReserveMB {
			return 0
		}
		mb = (p.Model.FramebufferMB - XePFReserveMB) / uint64(p.Split) / 2 * 2
	}
	return mb << 20
}

// XePriorities are the scheduling priorities a VF may have: the GuC allows
// "high" for the PF only.
func XePriorities() []string { return []string{"low", "normal"} }

// XePriority is o's priority, xe's default (low) when unset.
func (o *XeOptions) XePriority() string {
	if o == nil || o.Priority == "" {
		return "low"
	}
	return o.Priority
}

// MdevType names an entry of mdev_supported_types. ID may be empty: the
// type is then found by name alone, on the hardware that lists it.
type MdevType struct {
	ID   string `json:"id,omitempty"` // directory name: "nvidia-232"
	Name string `json:"name"`         // its name attribute: "GRID T4-4Q"
}

// GPUInstance is the MIG GPU instance profile a MIG-backed vGPU runs on.
type GPUInstance struct {
	Profile string `json:"profile"` // as nvidia-smi mig -lgip names it: "1g.5gb"
	// ID is the profile's id as nvidia-smi mig -lgip shows it (A100 40GB:
	// 1g.5gb is 19, 7g.40gb is 0), not NVML's index constant.
	ID int `json:"id"`
	// StatedMB is the instance's memory as NVML states it (the catalog's
	// memory-mb, measured: an H200's 1g.18gb has 16384 MiB, not 18 GB);
	// 0 when the catalog gives none.
	StatedMB uint64 `json:"memoryMB,omitempty"`
}

// MemoryMB is the instance's framebuffer: as the catalog states it, else
// as its name says ("1g.5gb": 5120, which the hardware gives less of); 0
// when neither says.
func (g GPUInstance) MemoryMB() uint64 {
	if g.StatedMB > 0 {
		return g.StatedMB
	}
	var slices, gb uint64
	if n, _ := fmt.Sscanf(g.Profile, "%dg.%dgb", &slices, &gb); n != 2 {
		return 0
	}
	return gb << 10
}

// NVIDIAType names a line of a VF's nvidia/creatable_vgpu_types. ID may be
// 0 where NVIDIA publishes none: the type is then found by name alone, and
// its id read from an idle VF's list.
type NVIDIAType struct {
	ID   int    `json:"id,omitempty"` // 1153
	Name string `json:"name"`         // "NVIDIA L40S-12Q"
}

// Profile is a Spec with the model it splits and the file defining it.
type Profile struct {
	Spec
	Model Model  `json:"model"`
	File  string `json:"file"`
}

// Matches reports whether a PCI function with these ids is this model.
func (m Model) Matches(vendor, device uint16) bool {
	return m.MdevParent == "" && (m.AnyGPU || vendor == m.VendorID && slices.Contains(m.DeviceIDs, device))
}

// IDs is the model's ids as lspci prints them: "10de:1eb8", or a list;
// "mdev parent mbochs" for a virtual mdev parent.
func (m Model) IDs() string {
	switch {
	case m.MdevParent != "":
		return "mdev parent " + m.MdevParent
	case m.AnyGPU:
		return "any ids"
	}
	ids := make([]string, len(m.DeviceIDs))
	for i, d := range m.DeviceIDs {
		ids[i] = fmt.Sprintf("%04x:%04x", m.VendorID, d)
	}
	return strings.Join(ids, ", ")
}

func (m Model) clone() Model {
	m.DeviceIDs = slices.Clone(m.DeviceIDs)
	if m.Migration != nil {
		mig := *m.Migration
		m.Migration = &mig
	}
	return m
}

// FramebufferMB is one vGPU's share of the model's framebuffer; 0 unknown.
func (p Profile) FramebufferMB() uint64 {
	if gi := p.GPUInstance; gi != nil && gi.MemoryMB() > 0 {
		return gi.MemoryMB() // its instance's, which the split does not divide evenly
	}
	if q := p.XeVRAMQuota(); q > 0 {
		return q >> 20 // what xe gives each VF
	}
	if p.Split <= 0 {
		return 0
	}
	return p.Model.FramebufferMB / uint64(p.Split)
}

// knownDialects in the order docs and messages list them.
func knownDialects() []inventory.Dialect {
	return []inventory.Dialect{
		inventory.DialectSRIOV,
		inventory.DialectMdev,
		inventory.DialectSRIOVMdev,
		inventory.DialectNVIDIAVF,
		inventory.DialectPassthrough,
	}
}

// allowedSplits is what a dialect can make at all: any equal split of
// SR-IOV VFs (a V710 takes 12 VFs) or of a typed dialect (an L40S-16Q is a
// 3:1 split), each checked against the hardware at Resolve; passthrough is
// the whole GPU. Which splits a model offers is its catalog entry's.
func allowedSplits(d inventory.Dialect) []int {
	switch d {
	case inventory.DialectPassthrough:
		return []int{1}
	default:
		s := make([]int, MaxSplit)
		for i := range s {
			s[i] = i + 1
		}
		return s
	}
}

// joinInts formats splits for messages: "1, 2, 4, 8, 16", "1 to 16".
func joinInts(v []int) string {
	if len(v) > 3 && v[len(v)-1]-v[0] == len(v)-1 {
		return fmt.Sprintf("%d to %d", v[0], v[len(v)-1])
	}
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// usesMdev and usesNVIDIA say which backend selector a dialect needs.
func usesMdev(d inventory.Dialect) bool {
	return d == inventory.DialectMdev || d == inventory.DialectSRIOVMdev
}

func usesNVIDIA(d inventory.Dialect) bool { return d == inventory.DialectNVIDIAVF }
