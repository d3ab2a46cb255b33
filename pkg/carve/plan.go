package carve

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/xe"
)

// vfioPCI is the driver a VFIO-passed PCI function ends on, unless it
// has a VFIO variant driver (pci.IsVFIODriver tells them all).
const vfioPCI = pci.VFIOPCI

// mdevNamespace seeds the deterministic UUIDs of carved mdevs, so a re-carve
// after a reboot recreates the same identities.
var mdevNamespace = uuid.MustParse("5c0b6f9e-3f5a-4c61-9a3e-7d0f3c2b9a10")

// MdevUUID is the UUID of the index-th mdev of typeID carved on parent.
func MdevUUID(parent, typeID string, index int) string {
	return uuid.NewSHA1(mdevNamespace, fmt.Appendf(nil, "%s/%s/%d", parent, typeID, index)).String()
}

// PlanCarve computes the ops that turn g into what p wants. original is the
// driver the PF had before vgpu moved it to vfio-pci ("" unknown).
//
// A MIG-backed profile's plan here assumes MIG is as the profile needs it
// (what Carries asks); a carve plans it with PlanCarveMIG.
func PlanCarve(g inventory.GPU, p profile.Plan, original string) (Plan, error) {
	return planCarve(g, p, original, nil)
}

func planCarve(g inventory.GPU, p profile.Plan, original string, st *MIGState) (Plan, error) {
	pl := Plan{GPU: g.Address, Profile: p.Profile}
	if p.Dialect == inventory.DialectPassthrough {
		// VFIO gives a VM the whole IOMMU group: the card's other
		// functions (HD audio, USB-C) go with it, and so do the host's
		// devices in the group, which Carver.Carve moves only when forced
		// (HostUse). Bridges stay on pcieport, which VFIO allows.
		pl.Ops = append(teardownVGPUs(g), Op{Kind: OpDriver, Device: g.Address, To: vfioPCI})
		for _, peer := range g.Peers {
			if !peer.Bridge() && peer.Driver != vfioPCI && (peer.SameCard(g.Address) || hostDriven(peer)) {
				pl.Ops = append(pl.Ops, Op{Kind: OpDriver, Device: peer.Address, To: vfioPCI})
			}
		}
		return dropNoops(g, pl), nil
	}
	// Every split dialect needs the PF on its vendor driver; old GIM
	// binds none.
	switch {
	case g.Driver == "" && byGIM(g):
	case pci.IsVFIODriver(g.Driver) || g.Driver == "":
		if original == "" || pci.IsVFIODriver(original) {
			return pl, fmt.Errorf("plan %s on %s: the GPU is %s and vgpu does not know its vendor driver; bind it to its vendor driver (for example with driverctl) and carve again",
				p.Profile, g.Address, driverState(g.Driver))
		}
		pl.Ops = append(pl.Ops, Op{Kind: OpDriver, Device: g.Address, To: original, Override: new("")})
		pl.Ops = append(pl.Ops, peersBack(g)...)
		// A PF on vfio-pci or unbound shows no VFs or mdev types: build from scratch.
		g = inventory.GPU{Address: g.Address, Driver: original}
	}

	switch p.Dialect {
	case inventory.DialectSRIOV:
		quotas, err := planXeQuota(g, p)
		if err != nil {
			return pl, err
		}
		ops := planVFs(g, p.NumVFs)
		fresh := len(ops) > 0
		if !fresh && len(quotas) > 0 {
			// xe takes a VF's VRAM as it is written before enabling
			// (docs/vendors/intel.md): VFs of another size are re-created.
			ops, fresh = append(disableVFs(g), Op{Kind: OpNumVFs, Device: g.Address, Count: p.NumVFs}), true
		}
		if byGIM(g) {
			ops = planGIM(g, p, ops)
		} else if p.GIM != nil {
			return pl, fmt.Errorf("plan %s on %s: the profile sets old AMD GIM's scheduler, and gim does not drive this GPU", p.Profile, g.Address)
		}
		if n := len(ops); n > 0 && createsVFs(ops[n-1]) && ops[n-1].Count > 0 {
			ops[n-1].Autoprobe = new(false) // the VFs go to a VFIO driver
			// Pinned VRAM goes in after the old VFs left, before the new come.
			ops = append(ops[:n-1], append(quotas, ops[n-1])...)
		}
		// One growth for a VF op each: labelling a GPU plans every
		// profile of its model, at every claim.
		pl.Ops = slices.Grow(pl.Ops, len(ops)+p.NumVFs)
		pl.Ops = append(pl.Ops, ops...)
		for i := range p.NumVFs {
			o := Op{Kind: OpDriver, Device: g.Address, VF: vfIndex(i), To: p.VFDriver}
			// A VF moved from one VFIO driver to another is a vGPU a VM
			// may hold: the move waits for no VM (Plan checks its use).
			if vf, ok := vfAt(g, i, p.NumVFs); ok && !fresh && vf.Driver != p.VFDriver && pci.IsVFIODriver(vf.Driver) {
				o.Destroys = vf.Address.String()
			}
			pl.Ops = append(pl.Ops, o)
		}
		xeOps, err := planXe(g, p, fresh)
		if err != nil {
			return pl, err
		}
		pl.Ops = append(pl.Ops, xeOps...)
	case inventory.DialectMdev:
		pf := g.Address.String()
		pl.Ops = append(pl.Ops, planMdevs(pf, g.MdevTypes, p.MdevType, p.Split, p.MdevUUIDs, func(i int) string {
			return MdevUUID(pf, p.MdevType, i)
		})...)
	case inventory.DialectSRIOVMdev:
		pl.Ops = append(pl.Ops, planVFs(g, p.NumVFs)...)
		slots := pinSlots(g, p)
		// NVIDIA hosts one mdev type per GPU: every old instance goes
		// before the first new one.
		var creates []Op
		for i := range p.NumVFs {
			want := 0
			if i < p.Split {
				want = 1
			}
			vf, have := vfAt(g, i, p.NumVFs)
			pl.Ops = append(pl.Ops, Op{Kind: OpDriver, Device: g.Address, VF: vfIndex(i), To: p.VFDriver})
			var types []inventory.MdevType
			parent := ""
			if have {
				types, parent = vf.MdevTypes, vf.Address.String()
			}
			for _, o := range planVFMdev(g.Address, i, parent, types, p.MdevType, want, slots[i], p.MdevUUIDs) {
				if o.Kind == OpMdevCreate {
					creates = append(creates, o)
				} else {
					pl.Ops = append(pl.Ops, o)
				}
			}
		}
		for _, vf := range extraVFs(g, p.NumVFs) {
			pl.Ops = append(pl.Ops, removeAll(vf.Address.String(), vf.MdevTypes)...)
		}
		pl.Ops = append(pl.Ops, creates...)
	case inventory.DialectNVIDIAVF:
		if p.GPUInstance != nil && st != nil {
			pl.Ops = append(pl.Ops, planMIG(g, p, *st)...)
			break
		}
		pl.Ops = append(pl.Ops, planVFs(g, p.NumVFs)...)
		// Free wrong types first: siblings only list what still fits.
		var sets []Op
		for i := range p.NumVFs {
			want := 0
			if i < p.Split {
				want = p.NVIDIATypeID
			}
			vf, have := vfAt(g, i, p.NumVFs)
			cur := 0
			if have && vf.NVIDIA != nil {
				cur = vf.NVIDIA.CurrentType
			}
			pl.Ops = append(pl.Ops, Op{Kind: OpDriver, Device: g.Address, VF: vfIndex(i), To: p.VFDriver})
			if cur != want && cur != 0 {
				pl.Ops = append(pl.Ops, Op{Kind: OpNVType, Device: g.Address, VF: vfIndex(i), Count: 0, Destroys: vf.Address.String()})
			}
			if cur != want && want != 0 {
				sets = append(sets, Op{Kind: OpNVType, Device: g.Address, VF: vfIndex(i), Count: want})
			}
		}
		for _, vf := range extraVFs(g, p.NumVFs) {
			if vf.NVIDIA != nil && vf.NVIDIA.CurrentType != 0 {
				pl.Ops = append(pl.Ops, Op{Kind: OpNVType, Device: vf.Address, Count: 0, Destroys: vf.Address.String()})
			}
		}
		pl.Ops = append(pl.Ops, sets...)
	default:
		return pl, fmt.Errorf("plan %s on %s: dialect %q is not supported", p.Profile, g.Address, p.Dialect)
	}
	return dropNoops(g, pl), nil
}

// PlanUncarve computes the ops that remove every vGPU of g and give the PF
// back its original driver.
func PlanUncarve(g inventory.GPU, original string) Plan {
	pl := Plan{GPU: g.Address, Ops: teardownVGPUs(g)}
	// The VFs' priority outlives them (xe): back to xe's default.
	if g.Xe != nil && g.Xe.Priority != "" && g.Xe.Priority != xeDefaultPriority() {
		pl.Ops = append(pl.Ops, Op{Kind: OpXeSched, Device: g.Address, Attr: xe.Priority, Value: xeDefaultPriority(), Bulk: true})
	}
	if pci.IsVFIODriver(g.Driver) && original != "" && !pci.IsVFIODriver(original) {
		pl.Ops = append(pl.Ops, Op{Kind: OpDriver, Device: g.Address, To: original, Override: new(""), Destroys: g.Address.String()})
		pl.Ops = append(pl.Ops, peersBack(g)...)
	}
	return dropNoops(g, pl)
}

// peersBack returns the functions of g's IOMMU group that a passthrough
// put on vfio-pci (the ledger remembers their drivers) to the drivers they
// had: the card's own, and the host's that a forced one took.
func peersBack(g inventory.GPU) []Op {
	var ops []Op
	for _, p := range g.Peers {
		if p.Driver == vfioPCI && p.Original != "" && p.Original != vfioPCI {
			ops = append(ops, Op{Kind: OpDriver, Device: p.Address, To: p.Original, Override: new(""), Destroys: p.Address.String()})
		}
	}
	return ops
}

// hostDriven: a device on a host driver; unbound devices, and those on
// vfio-pci or pci-stub, are no one's.
func hostDriven(p inventory.Peer) bool {
	switch p.Driver {
	case "", vfioPCI, "pci-stub":
		return false
	}
	return true
}

// hostPeers lists the devices in g's IOMMU group that a passthrough takes
// from the host: endpoints of another card on a host driver (a NIC, a
// disk, another GPU). Bridges stay on pcieport (vfio-pci refuses them, and
// the kernel allows them in a VFIO group).
func hostPeers(g inventory.GPU) []string {
	var out []string
	for _, p := range g.Peers {
		if !p.Bridge() && !p.SameCard(g.Address) && hostDriven(p) {
			out = append(out, fmt.Sprintf("%s (class %06x, on %s)", p.Address, p.Class, p.Driver))
		}
	}
	return out
}

// HostUse says what a passthrough of g would take from the host: its
// console (boot_vga) and the host's devices in its IOMMU group; "" when
// nothing. g.Peers must be read.
func HostUse(g inventory.GPU) string {
	var what []string
	if g.BootVGA {
		what = append(what, "it drives the host's console (boot_vga 1): the host loses its display")
	}
	if host := hostPeers(g); len(host) > 0 {
		what = append(what, fmt.Sprintf("VFIO gives a VM the whole IOMMU group %d, which also holds %s, used by the host",
			g.IOMMUGroup, strings.Join(host, ", ")))
	}
	return strings.Join(what, "; ")
}

// teardownVGPUs removes mdevs, frees NVIDIA types and disables VFs.
func teardownVGPUs(g inventory.GPU) []Op {
	ops := removeVGPUs(g)
	if g.SRIOV == nil || g.SRIOV.NumVFs == 0 {
		return ops
	}
	return append(ops, disableVFs(g)...)
}

// removeVGPUs removes g's mdevs and frees its VFs' NVIDIA types; the VFs
// stay.
func removeVGPUs(g inventory.GPU) []Op {
	ops := removeAll(g.Address.String(), g.MdevTypes)
	if g.SRIOV == nil || g.SRIOV.NumVFs == 0 {
		return ops
	}
	for _, vf := range g.SRIOV.VFs {
		ops = append(ops, removeAll(vf.Address.String(), vf.MdevTypes)...)
		if vf.NVIDIA != nil && vf.NVIDIA.CurrentType != 0 {
			ops = append(ops, Op{Kind: OpNVType, Device: vf.Address, Count: 0, Destroys: vf.Address.String()})
		}
	}
	return ops
}

// disableVFs unbinds VFs from their VFIO driver one by one, so an undo can rebind
// them, then sets sriov_numvfs to 0; an NVIDIA GPU's go with sriov-manage,
// which unbinds them itself. Old and new GIM keep their VFs as long as
// they are loaded (there is no "0 VFs"): they are only unbound.
func disableVFs(g inventory.GPU) []Op {
	destroys := "the VFs of " + g.Address.String()
	if bySriovManage(g) {
		return []Op{{Kind: OpSriovManage, Device: g.Address, Count: 0, Destroys: destroys}}
	}
	// Sized once, room left for the count the caller sets next: ProfileOf
	// plans every profile of a GPU, and each plan of another VF count
	// lands here.
	ops := make([]Op, 0, len(g.SRIOV.VFs)+2)
	for _, vf := range g.SRIOV.VFs {
		if pci.IsVFIODriver(vf.Driver) {
			ops = append(ops, Op{Kind: OpDriver, Device: vf.Address, To: "", Destroys: vf.Address.String()})
		}
	}
	if keepsOwnVFs(g) {
		return ops
	}
	return append(ops, Op{Kind: OpNumVFs, Device: g.Address, Count: 0, Destroys: destroys})
}

// bySriovManage: an NVIDIA GPU's VFs come and go only through
// sriov-manage, and always all of them (AI Enterprise 5 §2.8.2).
func bySriovManage(g inventory.GPU) bool { return g.VendorID == inventory.VendorNVIDIA }

// keepsVFs reports whether the VFs g has now serve a plan needing n: the
// same count, or on NVIDIA any count of at least n (sriov-manage enables
// them all).
func keepsVFs(g inventory.GPU, n int) bool {
	cur := 0
	if g.SRIOV != nil {
		cur = g.SRIOV.NumVFs
	}
	if bySriovManage(g) {
		return cur > 0 && cur >= n
	}
	return cur == n
}

// planVFs makes g have the n VFs a plan uses, tearing down existing VFs
// when they do not serve.
func planVFs(g inventory.GPU, n int) []Op {
	if keepsVFs(g, n) {
		return nil
	}
	var ops []Op
	if g.SRIOV != nil && g.SRIOV.NumVFs != 0 {
		for _, vf := range g.SRIOV.VFs {
			ops = append(ops, removeAll(vf.Address.String(), vf.MdevTypes)...)
			if vf.NVIDIA != nil && vf.NVIDIA.CurrentType != 0 {
				ops = append(ops, Op{Kind: OpNVType, Device: vf.Address, Count: 0, Destroys: vf.Address.String()})
			}
		}
		ops = append(ops, disableVFs(g)...)
	}
	switch {
	case n == 0:
	case bySriovManage(g):
		ops = append(ops, Op{Kind: OpSriovManage, Device: g.Address, Count: 1})
	case byGIM(g):
		ops = append(ops, Op{Kind: OpGIMReload, Device: g.Address, Count: n, Destroys: "the VFs of every GPU gim drives"})
	case byNewGIM(g):
		ops = append(ops, newGIMOp(g.Address, n))
	default:
		ops = append(ops, Op{Kind: OpNumVFs, Device: g.Address, Count: n})
	}
	return ops
}

// createsVFs: the op re-creates a PF's VFs with the count it names.
func createsVFs(o Op) bool {
	return o.Kind == OpNumVFs || o.Kind == OpGIMReload || o.Kind == OpAMDSMINumVF
}

// vfAt returns VF i of g when it exists and will survive the plan.
func vfAt(g inventory.GPU, i, n int) (inventory.VF, bool) {
	if g.SRIOV == nil || !keepsVFs(g, n) {
		return inventory.VF{}, false
	}
	for _, vf := range g.SRIOV.VFs {
		if vf.Index == i {
			return vf, true
		}
	}
	return inventory.VF{}, false
}

// extraVFs are g's VFs from index n on that a plan for n VFs keeps (an
// NVIDIA GPU has them all): what they carry must go.
func extraVFs(g inventory.GPU, n int) []inventory.VF {
	if g.SRIOV == nil || !keepsVFs(g, n) {
		return nil
	}
	var out []inventory.VF
	for _, vf := range g.SRIOV.VFs {
		if vf.Index >= n {
			out = append(out, vf)
		}
	}
	return out
}

func removeAll(parent string, types []inventory.MdevType) []Op {
	var ops []Op
	for _, t := range types {
		for _, u := range t.Instances {
			ops = append(ops, Op{Kind: OpMdevRemove, Parent: parent, Type: t.ID, UUID: u, Destroys: u})
		}
	}
	return ops
}

// planMdevs leaves exactly want instances of typeID on parent: the pinned
// UUIDs first (kept where they are of typeID, else made), then instances of
// typeID already there, then new ones named id(len(pins)), id(len(pins)+1),
// ... skipping UUIDs already there: a pin takes its index's place in the
// pool. A pinned UUID of another type is removed and made again with
// typeID (Plan refuses while a VM uses it).
func planMdevs(parent string, types []inventory.MdevType, typeID string, want int, pins []string, id func(int) string) []Op {
	var ops []Op
	pinned := map[string]bool{}
	for _, u := range pins {
		pinned[u] = true
	}
	have := map[string]bool{}
	others := 0 // unpinned instances kept
	for _, t := range types {
		for _, u := range t.Instances {
			if t.ID == typeID && (pinned[u] || others < want-len(pins)) {
				if !pinned[u] {
					others++
				}
				have[u] = true
				continue
			}
			ops = append(ops, Op{Kind: OpMdevRemove, Parent: parent, Type: t.ID, UUID: u, Destroys: u})
		}
	}
	for _, u := range pins {
		if !have[u] && len(have) < want {
			have[u] = true
			ops = append(ops, Op{Kind: OpMdevCreate, Parent: parent, Type: typeID, UUID: u})
		}
	}
	for i := len(pins); len(have) < want; i++ {
		u := id(i)
		if have[u] {
			continue
		}
		have[u] = true
		ops = append(ops, Op{Kind: OpMdevCreate, Parent: parent, Type: typeID, UUID: u})
	}
	return ops
}

// pinSlots places a sriov-mdev profile's pinned UUIDs on its VFs (one mdev
// each, on the first Split VFs): a pinned mdev of the type on one of those
// VFs stays where it is; the other pins go, in order, to VFs without an
// mdev of the type, then to those whose mdev is unpinned. slots[i] is VF
// i's pin, "" for none.
func pinSlots(g inventory.GPU, p profile.Plan) []string {
	slots := make([]string, max(p.NumVFs, p.Split))
	if len(p.MdevUUIDs) == 0 {
		return slots
	}
	placed := map[string]bool{}
	typed := make([]bool, len(slots)) // VF i has an mdev of the type
	for i := range p.Split {
		vf, ok := vfAt(g, i, p.NumVFs)
		if !ok {
			continue
		}
		for _, t := range vf.MdevTypes {
			for _, u := range t.Instances {
				if t.ID != p.MdevType {
					continue
				}
				typed[i] = true
				if slots[i] == "" && slices.Contains(p.MdevUUIDs, u) {
					slots[i], placed[u] = u, true
				}
			}
		}
	}
	rest := slices.DeleteFunc(slices.Clone(p.MdevUUIDs), func(u string) bool { return placed[u] })
	for _, busy := range []bool{false, true} {
		for i := 0; i < p.Split && len(rest) > 0; i++ {
			if slots[i] == "" && typed[i] == busy {
				slots[i], rest = rest[0], rest[1:]
			}
		}
	}
	return slots
}

// planVFMdev is planMdevs for VF i of pf, which may not exist yet: the
// parent is then resolved when the op runs. An unpinned UUID derives from
// the PF and VF index, which survive a re-enable; pin, when set, is the
// VF's UUID, and another pinned UUID (pins) found there goes (to its own
// VF).
func planVFMdev(pf pci.Address, i int, parent string, types []inventory.MdevType, typeID string, want int, pin string, pins []string) []Op {
	var own []string
	if pin != "" {
		own = []string{pin}
	}
	// Pinned UUIDs that belong elsewhere are not this VF's to keep.
	var kept []inventory.MdevType
	var ops []Op
	for _, t := range types {
		t.Instances = slices.DeleteFunc(slices.Clone(t.Instances), func(u string) bool {
			if u != pin && slices.Contains(pins, u) {
				ops = append(ops, Op{Kind: OpMdevRemove, Parent: parent, Type: t.ID, UUID: u, Destroys: u})
				return true
			}
			return false
		})
		kept = append(kept, t)
	}
	ops = append(ops, planMdevs(parent, kept, typeID, want, own, func(int) string {
		return MdevUUID(fmt.Sprintf("%s/vf%d", pf, i), typeID, 0)
	})...)
	for j := range ops {
		if parent == "" {
			ops[j].Device, ops[j].VF = pf, vfIndex(i)
		}
	}
	return ops
}

// dropNoops removes driver ops whose device is already there, so an
// applied profile plans nothing.
func dropNoops(g inventory.GPU, pl Plan) Plan {
	// VFs the plan re-creates start fresh: the inventory's drivers are moot.
	recreated := false
	for _, o := range pl.Ops {
		recreated = recreated || createsVFs(o) || o.Kind == OpSriovManage
	}
	out := pl.Ops[:0]
	for _, o := range pl.Ops {
		if o.Kind == OpDriver && o.Override == nil && !(recreated && o.VF != nil) && currentDriver(g, o) == o.To {
			continue
		}
		out = append(out, o)
	}
	pl.Ops = out
	return pl
}

// currentDriver is the driver g's inventory shows for the op's device;
// "?" when the device does not exist yet.
func currentDriver(g inventory.GPU, o Op) string {
	if o.VF == nil {
		if o.Device == g.Address {
			return g.Driver
		}
		if g.SRIOV != nil {
			for _, vf := range g.SRIOV.VFs {
				if vf.Address == o.Device {
					return vf.Driver
				}
			}
		}
		return "?"
	}
	if g.SRIOV != nil {
		for _, vf := range g.SRIOV.VFs {
			if vf.Index == *o.VF {
				return vf.Driver
			}
		}
	}
	return "?"
}

func driverState(d string) string {
	if d == "" {
		return "bound to no driver"
	}
	return "on " + d
}
