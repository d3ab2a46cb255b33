package inventory

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"sync"

	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/nvvf"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/xe"
)

// Errors callers branch on (with pci.ErrNoDevice for a missing address).
var (
	ErrNotGPU = errors.New("not a GPU")
	ErrIsVF   = errors.New("is a virtual function")
)

// PCI vendor ids vgpu branches on.
const (
	VendorNVIDIA = 0x10de
	VendorAMD    = 0x1002
)

// IsGPUClass reports whether a PCI class code is a display controller
// (0x03xxxx: VGA, 3D, other) or a processing accelerator (0x12xxxx: MI-class,
// H100 in compute mode).
func IsGPUClass(class uint32) bool {
	base := class >> 16
	return base == 0x03 || base == 0x12
}

// Discover lists the host's GPU physical functions, by address: every PCI
// function of GPU class that is not itself a VF, with its SR-IOV state,
// mdev types and NVIDIA per-VF types as the kernel shows them now.
func Discover(f sysfs.FS, names *Names) ([]GPU, error) {
	entries, err := sysfs.Names(f, sysfs.PCIDevices)
	if err != nil {
		return nil, fmt.Errorf("discover GPUs: %w", err)
	}
	nv, guest := nvidiaHost(f), guestOf(f)
	var out []GPU
	for _, e := range entries {
		a, err := pci.ParseAddress(e)
		if err != nil {
			continue
		}
		isGPU, err := isGPUPF(f, a)
		if errors.Is(err, fs.ErrNotExist) {
			continue // unplugged, or a VF removed, while we listed
		}
		if err != nil {
			return nil, fmt.Errorf("discover GPUs: %w", err)
		}
		if !isGPU {
			continue
		}
		g, err := describe(f, names, a, nv, guest)
		if err != nil {
			return nil, fmt.Errorf("discover GPUs: %w", err)
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address.Less(out[j].Address) })
	return out, nil
}

// Get describes the GPU at a, refusing addresses that are missing, not a
// GPU, or a VF (naming its PF).
func Get(f sysfs.FS, names *Names, a pci.Address) (GPU, error) {
	g := GPU{Address: a}
	var err error
	g.VendorID, g.DeviceID, g.Class, err = pci.ReadIDs(f, a)
	if errors.Is(err, fs.ErrNotExist) {
		// Whether the device is there is asked only when its ids are
		// not: asking first cost every view of a GPU one access more.
		if ok, xerr := pci.Exists(f, a); xerr == nil && !ok {
			return GPU{}, fmt.Errorf("describe GPU %s: %w %s (no %s)", a, pci.ErrNoDevice, a, pci.DevicePath(a))
		}
	}
	if err != nil {
		return GPU{}, fmt.Errorf("describe GPU %s: %w", a, err)
	}
	if !IsGPUClass(g.Class) {
		return GPU{}, fmt.Errorf("describe GPU %s: %s %w (class 0x%06x; GPUs are 0x03xxxx or 0x12xxxx)", a, a, ErrNotGPU, g.Class)
	}
	if pf, isVF, err := sriov.PhysFn(f, a); err != nil {
		return GPU{}, fmt.Errorf("describe GPU %s: %w", a, err)
	} else if isVF {
		return GPU{}, fmt.Errorf("describe GPU %s: %s %w of %s; name the PF", a, a, ErrIsVF, pf)
	}
	if g, err = describeIDs(f, names, g, nvidiaHost(f), guestOf(f)); err != nil {
		return GPU{}, fmt.Errorf("describe GPU %s: %w", a, err)
	}
	return g, nil
}

// isGPUPF: GPU class, and no physfn link (VFs are listed under their PF).
func isGPUPF(f sysfs.FS, a pci.Address) (bool, error) {
	class, err := sysfs.ReadUint(f, pci.DevicePath(a)+"/class", 32)
	if err != nil {
		return false, err
	}
	if !IsGPUClass(uint32(class)) {
		return false, nil
	}
	_, isVF, err := sriov.PhysFn(f, a)
	return !isVF, err
}

// nvidiaHost reads the nvidia module's version and kind and the kernel's
// release at most once, when an NVIDIA GPU first needs them: one discovery
// reads them for all its GPUs.
func nvidiaHost(f sysfs.FS) func() (nvHost, error) {
	return sync.OnceValues(func() (nvHost, error) { return readNVHost(f) })
}

// guestOf reads at most once whether the PCI topology shows a VM guest.
func guestOf(f sysfs.FS) func() (string, error) {
	return sync.OnceValues(func() (string, error) { return readGuest(f) })
}

func describe(f sysfs.FS, names *Names, a pci.Address, nv func() (nvHost, error), guest func() (string, error)) (GPU, error) {
	g := GPU{Address: a}
	var err error
	if g.VendorID, g.DeviceID, g.Class, err = pci.ReadIDs(f, a); err != nil {
		return g, err
	}
	return describeIDs(f, names, g, nv, guest)
}

// describeIDs describes the GPU g names by address, its ids read.
func describeIDs(f sysfs.FS, names *Names, g GPU, nv func() (nvHost, error), guest func() (string, error)) (GPU, error) {
	a := g.Address
	var err error
	g.VendorName = names.Vendor(g.VendorID)
	g.DeviceName = names.Device(g.VendorID, g.DeviceID)
	if g.NUMANode, err = pci.NUMANode(f, a); err != nil {
		return g, err
	}
	if g.IOMMUGroup, err = group(f, a); err != nil {
		return g, err
	}
	if g.Driver, err = pci.CurrentDriver(f, a); err != nil {
		return g, err
	}
	if g.BootVGA, err = readBootVGA(f, a); err != nil {
		return g, err
	}
	if g.Guest, err = guest(); err != nil {
		return g, err
	}
	if g.VendorID == VendorNVIDIA {
		h, err := nv()
		if err != nil {
			return g, err
		}
		g.NVIDIADriver = h.driver()
	}
	if g.SRIOV, err = readSRIOV(f, a); err != nil {
		return g, err
	}
	if g.MdevTypes, err = mdevTypes(f, a.String()); err != nil {
		return g, err
	}
	if g.FramebufferMB, err = framebufferMB(f, &g); err != nil {
		return g, err
	}
	if g.Xe, err = readXe(f, g); err != nil {
		return g, err
	}
	if IsGIM(g.VendorID, g.DeviceID) {
		if g.GIM, err = ReadGIM(f); err != nil {
			return g, err
		}
	}
	if g.Dialects, g.Unavailable, err = dialects(&g, nv); err != nil {
		return g, err
	}
	return g, nil
}

func group(f sysfs.FS, a pci.Address) (int, error) {
	g, ok, err := pci.IOMMUGroup(f, a)
	if err != nil || !ok {
		return -1, err
	}
	return g, nil
}

// mdevTypes lists parent's types, nil when it is not an mdev parent.
func mdevTypes(f sysfs.FS, parent string) ([]MdevType, error) {
	ts, err := mdev.Types(f, parent)
	if errors.Is(err, mdev.ErrNoParent) {
		return nil, nil
	}
	return ts, err
}

// readSRIOV is nil for a function without SR-IOV (or with 0 VFs possible).
func readSRIOV(f sysfs.FS, pf pci.Address) (*SRIOV, error) {
	total, ok, err := sriov.PFTotalVFs(f, pf)
	if err != nil || !ok {
		return nil, err
	}
	s := &SRIOV{TotalVFs: total}
	if s.TotalVFs == 0 {
		return nil, nil
	}
	if s.NumVFs, err = sriov.NumVFs(f, pf); err != nil {
		return nil, err
	}
	// sriov_vf_device is missing before Linux 5.9: leave the id 0.
	if s.VFDeviceID, err = sriov.VFDeviceID(f, pf); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if s.NumVFs == 0 {
		// No VFs, no virtfn links (HARDWARE.md); the kernel reads
		// sriov_numvfs under the device lock its write holds (since
		// Linux 5.8), so 0 is not an enable half done. Nothing to list.
		return s, nil
	}
	vfs, err := sriov.VFs(f, pf)
	if err != nil {
		return nil, err
	}
	for _, v := range vfs {
		vf := VF{Index: v.Index, Address: v.Address}
		if vf.Driver, err = pci.CurrentDriver(f, v.Address); err != nil {
			return nil, err
		}
		if vf.IOMMUGroup, err = group(f, v.Address); err != nil {
			return nil, err
		}
		if vf.MdevTypes, err = mdevTypes(f, v.Address.String()); err != nil {
			return nil, err
		}
		creatable, cur, ok, err := nvvf.Read(f, v.Address)
		if err != nil {
			return nil, err
		}
		if ok {
			vf.NVIDIA = &NVIDIAVF{Creatable: creatable, CurrentType: cur}
		}
		s.VFs = append(s.VFs, vf)
	}
	return s, nil
}

// readXe reads the enabled VFs' scheduling profiles of a PF xe drives.
func readXe(f sysfs.FS, g GPU) (*XeAdmin, error) {
	if g.Driver != xe.Driver || g.SRIOV == nil {
		return nil, nil
	}
	ok, err := xe.HasAdmin(f, g.Address)
	if err != nil || !ok {
		return nil, err
	}
	x := &XeAdmin{VFs: []xe.Sched{}}
	// One priority for every VF, shown by each, enabled or not.
	if x.Priority, err = xe.Read(f, g.Address, xe.VFFile(g.Address, 1, xe.Priority)); err != nil {
		return nil, err
	}
	if x.Quota, err = xe.HasQuota(f, g.Address); err != nil {
		return nil, err
	}
	for n := 1; n <= g.SRIOV.NumVFs; n++ {
		s, err := xe.ReadVF(f, g.Address, n)
		if err != nil {
			return nil, err
		}
		x.VFs = append(x.VFs, s)
		if x.Quota {
			q, err := xe.ReadQuota(f, g.Address, n)
			if err != nil {
				return nil, err
			}
			x.Quotas = append(x.Quotas, q)
		}
	}
	if ok, err := xe.VFIOLoaded(f); err != nil {
		return nil, err
	} else if ok {
		x.VFIODriver = xe.VFIODriver
	}
	return x, nil
}

// dialects lists how this host can split g now, most specific first,
// passthrough last, and apart the dialects g would speak that the host
// stands in the way of, with the reason (WhyNot). nv is the NVIDIA host's
// word (readNVHost), asked for the branch only for an NVIDIA GPU whose VFs
// do not show how they take vGPUs.
func dialects(g *GPU, nv func() (nvHost, error)) ([]Dialect, []Unavailable, error) {
	var cands []Dialect
	nvidia := g.VendorID == VendorNVIDIA
	gen := nvidiaUnknown
	if nvidia {
		gen = nvidiaByDevice(g.DeviceID)
	}
	// A PF-mdev board shows its types only under the vGPU host driver:
	// under another, say so.
	if len(g.MdevTypes) > 0 || nvidia && gen == nvidiaPFMdev && notVGPUHost(g.NVIDIADriver) != "" {
		cands = append(cands, DialectMdev)
	}
	switch s := g.SRIOV; {
	case s != nil:
		var perVF, vfMdev bool
		for _, v := range s.VFs {
			perVF = perVF || v.NVIDIA != nil
			vfMdev = vfMdev || len(v.MdevTypes) > 0
		}
		switch {
		case perVF || vfMdev:
			if perVF {
				cands = append(cands, DialectNVIDIAVF)
			}
			if vfMdev {
				cands = append(cands, DialectSRIOVMdev)
			}
		case !nvidia:
			cands = append(cands, DialectSRIOV)
		case len(g.MdevTypes) > 0 || gen == nvidiaPFMdev:
			// the VFs of a PF-mdev GPU are not vGPUs
		default:
			h, err := nv()
			if err != nil {
				return nil, nil, err
			}
			cands = append(cands, nvidiaSplits(nvidiaGeneration(g.DeviceID, h))...)
		}
	case nvidia && (gen == nvidiaPerVF || gen == nvidiaVFMdev):
		// An SR-IOV board that shows no capability: say why.
		cands = append(cands, nvidiaSplits(gen)...)
	}
	cands = append(cands, DialectPassthrough)
	var ok []Dialect
	var blocked []Unavailable
	for _, d := range cands {
		if why := WhyNot(*g, d); why != "" {
			blocked = append(blocked, Unavailable{Dialect: d, Reason: why})
		} else {
			ok = append(ok, d)
		}
	}
	return ok, blocked, nil
}

// nvidiaSplits is how an NVIDIA generation makes vGPUs of its VFs.
func nvidiaSplits(gen nvidiaGen) []Dialect {
	switch gen {
	case nvidiaPerVF:
		return []Dialect{DialectNVIDIAVF}
	case nvidiaVFMdev:
		return []Dialect{DialectSRIOVMdev}
	}
	// unknown generation: both, until VFs show which one holds
	return []Dialect{DialectNVIDIAVF, DialectSRIOVMdev}
}

// nvidiaTypeSize reads the framebuffer in GB from an NVIDIA type name:
// "NVIDIA L40S-48Q" is 48, "GRID T4-4Q" 4.
var nvidiaTypeSize = regexp.MustCompile(`-(\d+)[A-Z]+$`)

// framebufferMB is the largest figure the hardware states: amdgpu's
// mem_info_vram_total, an mdev type's framebuffer times its max instances
// (PF or VF types), or the largest NVIDIA per-VF type. 0 when none says.
func framebufferMB(f sysfs.FS, g *GPU) (uint64, error) {
	var best uint64
	take := func(v uint64) { best = max(best, v) }
	p := pci.DevicePath(g.Address) + "/mem_info_vram_total"
	if ok, err := sysfs.Exists(f, p); err != nil {
		return 0, err
	} else if ok {
		b, err := sysfs.ReadUint(f, p, 64)
		if err != nil {
			return 0, err
		}
		take(b >> 20)
	}
	fromTypes := func(ts []MdevType) {
		for _, t := range ts {
			if t.MaxInstances > 0 {
				take(t.FramebufferMB * uint64(t.MaxInstances))
			}
		}
	}
	fromTypes(g.MdevTypes)
	if g.SRIOV != nil {
		for _, v := range g.SRIOV.VFs {
			fromTypes(v.MdevTypes)
			if v.NVIDIA == nil {
				continue
			}
			for _, t := range v.NVIDIA.Creatable {
				if m := nvidiaTypeSize.FindStringSubmatch(t.Name); m != nil {
					if gb, err := strconv.ParseUint(m[1], 10, 32); err == nil {
						take(gb * 1024)
					}
				}
			}
		}
	}
	return best, nil
}
