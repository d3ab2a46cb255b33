package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/api/convert"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/nvvf"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// GPUs lists the host's GPUs with the profile each carries and the one
// the config wants.
func (e *Engine) GPUs(ctx context.Context) ([]api.GPU, error) {
	v, err := e.currentView(ctx, false)
	if err != nil {
		return nil, err
	}
	out := make([]api.GPU, len(v.gpus))
	for i, g := range v.gpus {
		out[i] = convert.GPU(g, v.actual[g.Address], v.desired[g.Address])
	}
	return out, nil
}

// GPUAddresses lists the host's GPUs' PCI addresses: what GPUs says
// without converting each GPU's VFs, for the device plugin's relists.
func (e *Engine) GPUAddresses(ctx context.Context) ([]string, error) {
	v, err := e.currentView(ctx, false)
	if err != nil {
		return nil, err
	}
	return slices.Clone(v.addrs), nil
}

// VGPUs lists the host's vGPUs with the domain each is reserved for,
// attached or leased to (the ledger's State) and, apart from that, whether
// a process holds it now (InUse, Holder: /proc). A VF reserved for a
// stopped domain is reserved, not in use. A vGPU nobody visible holds while
// some process's open files cannot be read is UseUnknown, and warning says
// why, once; /proc is read only if a vGPU has a VFIO node.
func (e *Engine) VGPUs(ctx context.Context) (vgpus []api.VGPU, warning string, err error) {
	v, err := e.currentView(ctx, false)
	if err != nil {
		return nil, "", err
	}
	usage := carve.VFIOUsage{FS: e.fs}.Snapshot()
	allocs, leases, err := e.held()
	if err != nil {
		return nil, "", err
	}
	byID := map[string]ledger.Allocation{}
	for _, a := range allocs {
		byID[a.VGPU] = a
	}
	leased := map[string]ledger.Lease{}
	for _, l := range leases {
		leased[l.VGPU] = l
	}
	numa := map[string]int{}
	vendor := map[string]string{}
	for _, g := range v.gpus {
		numa[g.Address.String()] = g.NUMANode
		vendor[g.Address.String()] = g.Driver
	}
	versions := map[string]string{}
	out := make([]api.VGPU, 0, len(v.vgpus))
	for _, x := range v.vgpus {
		n, ok := numa[x.GPU]
		if !ok {
			n = -1
		}
		r := convert.VGPU(x)
		r.NUMANode, r.State, r.VendorDriver = n, api.StateFree, vendor[x.GPU]
		if _, onGPU := vendor[x.GPU]; !onGPU {
			r.VendorDriver = x.GPU // a virtual mdev parent is named after its module (mtty, mbochs)
		}
		if r.VendorDriver != "" {
			ver, ok := versions[r.VendorDriver]
			if !ok {
				// Modules without a version (the kernel's samples) have none.
				ver, _ = sysfs.ReadString(e.fs, sysfs.Modules+"/"+r.VendorDriver+"/version")
				versions[r.VendorDriver] = ver
			}
			r.DriverVersion = ver
		}
		if a, ok := byID[x.ID]; ok {
			r.State, r.DomainUUID, r.DomainName, r.Since, r.Pod = string(a.State), a.DomainUUID, a.DomainName, a.Since, convert.Pod(a.Pod)
		} else if l, ok := leased[x.ID]; ok {
			r.State, r.DomainUUID, r.DomainName, r.Expires = api.StateLeased, l.DomainUUID, l.DomainName, l.Expires
		}
		r.Holder, r.InUse, err = usage.Holder(ctx, x.ID)
		switch {
		case errors.Is(err, carve.ErrUseUnknown):
			r.UseUnknown = true
		case err != nil:
			return nil, "", err
		}
		out = append(out, r)
	}
	return out, usage.Warning(), nil
}

// held reads every allocation and lease in one transaction: a view in
// which a vGPU moving from a lease to an allocation is in one of them.
func (e *Engine) held() (as []ledger.Allocation, ls []ledger.Lease, err error) {
	err = e.ledger.View(func(tx *ledger.Tx) error {
		var err error
		if as, err = tx.Allocations(); err != nil {
			return err
		}
		ls, err = tx.Leases()
		return err
	})
	return as, ls, err
}

// Holdings lists every allocation and live lease, or those of one domain
// when domainUUID is not "".
func (e *Engine) Holdings(ctx context.Context, domainUUID string) (api.Holdings, error) {
	as, ls, err := e.held()
	if err != nil {
		return api.Holdings{}, err
	}
	var v *hostView
	if domainUUID == "" {
		v, err = e.currentView(ctx, false)
	} else {
		// One domain's: only the kinds of its vGPUs are read, each from its
		// own device (an mdev's is its UUID's): not their GPUs.
		v = &hostView{}
		for _, id := range domainVGPUs(as, ls, domainUUID) {
			k, kerr := vgpuKind(e.fs, id)
			if kerr != nil {
				return api.Holdings{}, fmt.Errorf("read the kind of vGPU %s of domain %s: %w", id, domainUUID, kerr)
			}
			if k != "" {
				v.vgpus = append(v.vgpus, vgpu.VGPU{ID: id, Kind: k})
			}
		}
	}
	if err != nil {
		return api.Holdings{}, err
	}
	return holdings(v, as, ls, domainUUID), nil
}

// domainVGPUs are the ids of the domain's allocations and leases that are
// no mdev UUIDs.
func domainVGPUs(as []ledger.Allocation, ls []ledger.Lease, domainUUID string) []string {
	var ids []string
	for _, a := range as {
		if a.DomainUUID == domainUUID && !isUUID(a.VGPU) {
			ids = append(ids, a.VGPU)
		}
	}
	for _, l := range ls {
		if l.DomainUUID == domainUUID && !isUUID(l.VGPU) {
			ids = append(ids, l.VGPU)
		}
	}
	return ids
}

// vgpuKind is the kind the device at id has now, read from its own
// directory as carve.VGPUs lists a GPU's vGPUs: a VF with an NVIDIA vGPU
// type, a VF or a PF on a VFIO driver; "" when it is none of these (gone,
// off VFIO, its type cleared) or id is no PCI address.
func vgpuKind(f sysfs.FS, id string) (vgpu.Kind, error) {
	a, err := pci.ParseAddress(id)
	if err != nil {
		return "", nil
	}
	if ok, err := pci.Exists(f, a); err != nil || !ok {
		return "", err
	}
	_, isVF, err := sriov.PhysFn(f, a)
	if err != nil {
		return "", err
	}
	drv, err := pci.CurrentDriver(f, a)
	if err != nil {
		return "", err
	}
	if !isVF {
		if drv == pci.VFIOPCI {
			return vgpu.KindPF, nil
		}
		return "", nil
	}
	_, cur, ok, err := nvvf.Read(f, a)
	switch {
	case err != nil:
		return "", err
	case ok && cur != 0:
		return vgpu.KindNVIDIAVF, nil
	case pci.IsVFIODriver(drv):
		return vgpu.KindVF, nil
	}
	return "", nil
}

func holdings(v *hostView, as []ledger.Allocation, ls []ledger.Lease, domainUUID string) api.Holdings {
	h := api.Holdings{Allocations: []api.Allocation{}, Leases: []api.Lease{}}
	for _, a := range as {
		if domainUUID == "" || a.DomainUUID == domainUUID {
			h.Allocations = append(h.Allocations, apiAllocation(v, a))
		}
	}
	for _, l := range ls {
		if domainUUID == "" || l.DomainUUID == domainUUID {
			h.Leases = append(h.Leases, apiLease(v, l))
		}
	}
	return h
}

func apiAllocation(v *hostView, a ledger.Allocation) api.Allocation {
	return api.Allocation{VGPU: a.VGPU, Kind: string(kindOf(v, a.VGPU)), GPU: a.Owner(), Profile: a.Profile,
		DomainUUID: a.DomainUUID, DomainName: a.DomainName, State: string(a.State), Since: a.Since, Pod: convert.Pod(a.Pod)}
}

func apiLease(v *hostView, l ledger.Lease) api.Lease {
	return api.Lease{VGPU: l.VGPU, Kind: string(kindOf(v, l.VGPU)), GPU: l.Owner(), Profile: l.Profile,
		DomainUUID: l.DomainUUID, DomainName: l.DomainName, Expires: l.Expires}
}

func apiLeases(v *hostView, ls []ledger.Lease) []api.Lease {
	out := make([]api.Lease, len(ls))
	for i, l := range ls {
		out[i] = apiLease(v, l)
	}
	return out
}

func apiAllocations(v *hostView, as []ledger.Allocation) []api.Allocation {
	out := make([]api.Allocation, len(as))
	for i, a := range as {
		out[i] = apiAllocation(v, a)
	}
	return out
}

// kindOf is the vGPU's kind on the host, or what its id says when it is not
// there (a UUID is an mdev).
func kindOf(v *hostView, id string) vgpu.Kind {
	if v != nil {
		if x, ok := v.vgpu(id); ok {
			return x.Kind
		}
	}
	if isUUID(id) {
		return vgpu.KindMdev
	}
	return ""
}
