package simnvml

import (
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// Device is one GPU; it implements nvmlstate.Device.
type Device struct {
	s     *Server // its mu guards every field below
	index int
	addr  pci.Address
	uuid  string
	m     model

	migCurrent, migPending int
	busy                   bool // clients on the GPU
	vfs                    bool // SR-IOV VFs enabled
	gis                    map[uint32]*GpuInstance

	// The vGPU scheduler (nvmlVgpuSchedulerSetState_t), best effort at
	// driver load.
	schedPolicy, schedARR                          uint32
	schedTimeslice, schedAvgFactor, schedFrequency uint32
	// hetero: vGPU heterogeneous (mixed-size) mode, off at driver load.
	hetero bool
}

// lock takes the server lock and reports whether NVML is initialised; the
// caller unlocks.
func (d *Device) lock() nvml.Return {
	d.s.mu.Lock()
	if d.s.refs == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	return nvml.SUCCESS
}

func (d *Device) unlock() { d.s.mu.Unlock() }

// lockCounting is lock after counting the GPU's vGPUs (SetVGPUs; 0 without
// a kernel). The kernel is asked before the server lock: it calls into the
// server under its own lock. The caller unlocks.
func (d *Device) lockCounting() (int, nvml.Return) {
	d.s.mu.Lock()
	count, bus := d.s.vgpus, d.addr.String()
	d.s.mu.Unlock()
	vgpus := 0
	if count != nil {
		vgpus = count(bus)
	}
	return vgpus, d.lock()
}

// GetIndex returns the NVML index.
func (d *Device) GetIndex() (int, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return 0, r
	}
	return d.index, nvml.SUCCESS
}

// GetName returns the product name as nvidia-smi prints it.
func (d *Device) GetName() (string, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return "", r
	}
	return d.m.name, nvml.SUCCESS
}

// GetUUID returns a stable "GPU-..." UUID derived from the PCI address.
func (d *Device) GetUUID() (string, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return "", r
	}
	return d.uuid, nvml.SUCCESS
}

// GetPciInfo fills both bus ID forms and the device/vendor ID.
func (d *Device) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return nvml.PciInfo{}, r
	}
	info := nvml.PciInfo{
		Domain:      d.addr.Domain,
		Bus:         uint32(d.addr.Bus),
		Device:      uint32(d.addr.Device),
		PciDeviceId: d.m.pciID,
	}
	copyCString(info.BusId[:], nvmlBusID(d.addr))
	copyCString(info.BusIdLegacy[:], legacyBusID(d.addr))
	return info, nvml.SUCCESS
}

func copyCString(dst []int8, s string) {
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

// GetMemoryInfo reports the whole framebuffer free: the fake runs no
// processes. The total is what the driver gives, below the nominal size
// (an H200's 143771 MiB of 141 GB).
func (d *Device) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return nvml.Memory{}, r
	}
	total := d.m.memMB << 20
	return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
}

// GetMigMode returns the current and the pending mode.
func (d *Device) GetMigMode() (int, int, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return 0, 0, r
	}
	if len(d.m.profiles) == 0 {
		return 0, 0, nvml.ERROR_NOT_SUPPORTED // no MIG on this GPU
	}
	return d.migCurrent, d.migPending, nvml.SUCCESS
}

// SetMigMode sets the pending mode and activates it at once on an idle GPU.
// On a busy one the change stays pending until ResetGPU, and the activation
// status is nvml.ERROR_IN_USE ("MIG mode is in pending enable state ... In
// use by another client"). Disabling is refused outright while GPU instances
// exist or VFs are enabled ("Unable to disable MIG Mode ... In use by
// another client").
func (d *Device) SetMigMode(mode int) (nvml.Return, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return r, r
	}
	if len(d.m.profiles) == 0 {
		return nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED
	}
	if mode != nvml.DEVICE_MIG_DISABLE && mode != nvml.DEVICE_MIG_ENABLE {
		return nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_INVALID_ARGUMENT
	}
	if mode == nvml.DEVICE_MIG_DISABLE && d.migCurrent == nvml.DEVICE_MIG_ENABLE && (len(d.gis) > 0 || d.vfs) {
		return nvml.ERROR_IN_USE, nvml.ERROR_IN_USE
	}
	d.migPending = mode
	if d.migCurrent == mode {
		return nvml.SUCCESS, nvml.SUCCESS
	}
	if d.busy || d.vfs {
		return nvml.ERROR_IN_USE, nvml.SUCCESS
	}
	d.migCurrent = mode
	d.wipe()
	return nvml.SUCCESS, nvml.SUCCESS
}

// driverProfileCount is the NVML_GPU_INSTANCE_PROFILE_COUNT of the driver
// modelled: NVML 13.580.159.04 answered INVALID_ARGUMENT from index 17 on
// (go-nvml's header, newer, has 17 as 3_SLICE_GFX and counts 18).
const driverProfileCount = 17

// migOn reports whether GPU instances may exist. Caller holds the lock.
func (d *Device) migOn() bool { return d.migCurrent == nvml.DEVICE_MIG_ENABLE }

// GetGpuInstanceProfileInfo takes a profile INDEX (nvml.GPU_INSTANCE_PROFILE_*)
// and returns the profile with its real ID, MIG on or off: a real H200 with
// MIG off answered SUCCESS for each of its profiles.
func (d *Device) GetGpuInstanceProfileInfo(index int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return nvml.GpuInstanceProfileInfo{}, r
	}
	// nvml.h: enumerate from 0 "until the API returns INVALID_ARGUMENT".
	if index < 0 || index >= driverProfileCount {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	p, ok := d.m.byIndex(index)
	if !ok {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return p.info(), nvml.SUCCESS
}

// GetGpuInstancePossiblePlacements lists every placement of the profile
// whose ID info.Id names, free or not. nvml.h: this works "regardless of
// whether MIG is enabled or not", and a real H200 with MIG off did.
func (d *Device) GetGpuInstancePossiblePlacements(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return nil, r
	}
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	p, ok := d.m.byID(info.Id)
	if !ok {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	out := make([]nvml.GpuInstancePlacement, 0, len(p.starts))
	for _, st := range p.starts {
		out = append(out, nvml.GpuInstancePlacement{Start: st, Size: p.size})
	}
	return out, nvml.SUCCESS
}

// GetGpuInstanceRemainingCapacity counts how many more instances of the
// profile fit now, as the Free column of nvidia-smi mig -lgip. With MIG off
// a real H200's -lgip still listed every profile with its free/total
// count, so it answers: with no instance, the profile's whole count (that
// figure is this model's reading (?): the measurement kept the totals).
func (d *Device) GetGpuInstanceRemainingCapacity(info *nvml.GpuInstanceProfileInfo) (int, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return 0, r
	}
	if info == nil {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	p, ok := d.m.byID(info.Id)
	if !ok {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return d.remaining(p), nvml.SUCCESS
}

// CreateGpuInstance creates an instance where the driver would put it (see
// choosePlacement).
func (d *Device) CreateGpuInstance(info *nvml.GpuInstanceProfileInfo) (nvmlstate.GpuInstance, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return nil, r
	}
	p, r := d.createCheck(info)
	if r != nvml.SUCCESS {
		return nil, r
	}
	start, ok := d.choosePlacement(p)
	if !ok {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	return d.add(p, start), nvml.SUCCESS
}

// CreateGpuInstanceWithPlacement creates an instance at a placement that
// GetGpuInstancePossiblePlacements lists; any other placement is an invalid
// argument, a listed but occupied one is out of resources.
func (d *Device) CreateGpuInstanceWithPlacement(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvmlstate.GpuInstance, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return nil, r
	}
	if pl == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	p, r := d.createCheck(info)
	if r != nvml.SUCCESS {
		return nil, r
	}
	if pl.Size != p.size || !slices.Contains(p.starts, pl.Start) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if !d.free(pl.Start, p.size) {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	return d.add(p, pl.Start), nvml.SUCCESS
}

// createCheck validates a create request and the limits that do not depend
// on placement. Caller holds the lock.
func (d *Device) createCheck(info *nvml.GpuInstanceProfileInfo) (profile, nvml.Return) {
	if info == nil {
		return profile{}, nvml.ERROR_INVALID_ARGUMENT
	}
	if !d.migOn() {
		return profile{}, nvml.ERROR_NOT_SUPPORTED
	}
	p, ok := d.m.byID(info.Id)
	if !ok {
		return profile{}, nvml.ERROR_INVALID_ARGUMENT
	}
	if d.countOf(p.id) >= int(p.count) || !d.mediaFits(p) {
		return profile{}, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	return p, nvml.SUCCESS
}

func (d *Device) add(p profile, start uint32) *GpuInstance {
	gi := &GpuInstance{d: d, id: giID(d.m.memSlices, start, p.size), p: p, start: start}
	d.gis[gi.id] = gi
	return gi
}

// GetGpuInstances lists the instances of one profile by ID. Like go-nvml's
// wrapper it needs info.InstanceCount to size the buffer.
func (d *Device) GetGpuInstances(info *nvml.GpuInstanceProfileInfo) ([]nvmlstate.GpuInstance, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return nil, r
	}
	if info == nil || info.InstanceCount == 0 {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if !d.migOn() {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if _, ok := d.m.byID(info.Id); !ok {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	out := []nvmlstate.GpuInstance{}
	for _, gi := range d.sortedGIs() {
		if gi.p.id == info.Id && len(out) < int(info.InstanceCount) {
			out = append(out, gi)
		}
	}
	return out, nvml.SUCCESS
}

// GetGpuInstanceById finds an instance by its GPU instance ID.
func (d *Device) GetGpuInstanceById(id int) (nvmlstate.GpuInstance, nvml.Return) {
	r := d.lock()
	defer d.unlock()
	if r != nvml.SUCCESS {
		return nil, r
	}
	if id < 0 {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if !d.migOn() {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	gi, ok := d.gis[uint32(id)]
	if !ok {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return gi, nvml.SUCCESS
}

// sortedGIs returns the instances by ID. Caller holds the lock.
func (d *Device) sortedGIs() []*GpuInstance {
	out := make([]*GpuInstance, 0, len(d.gis))
	for _, gi := range d.gis {
		out = append(out, gi)
	}
	slices.SortFunc(out, func(a, b *GpuInstance) int { return int(a.id) - int(b.id) })
	return out
}

// wipe destroys every instance; their handles turn invalid. Caller holds
// the lock.
func (d *Device) wipe() { clear(d.gis) }
