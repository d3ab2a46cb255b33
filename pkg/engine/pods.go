package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"time"

	"github.com/vgpu-project/vgpu/internal/change"
	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// A pod's container gets vGPUs through the kubelet's device manager
// (pkg/deviceplugin), which picks the ids itself among those advertised
// and asks for them in Allocate; vgpud answers once they are claimed and
// ready. The kubelet never says when the pod ends: the device plugin asks
// its PodResources API and frees claims no live pod holds (Unreserve).
//
// Ledger protocol of a claim, crash-safe at every step:
//
//  1. the kernel: VFs that drifted are made ready as prepare does (each in
//     its own allocate intent; ready and unclaimed is the pool's state);
//  2. one transaction: the vGPUs are claimed (reserved) and a pod-claim
//     intent naming the claim is begun; from here no domain and no other
//     pod can be given them;
//  3. NVIDIA plugin parameters are written;
//  4. one transaction: the claim is marked attached and the intent ends;
//     only then is the kubelet answered.
//
// A profile without plugin parameters has no kernel work between the claim
// and the answer: steps 2 and 4 are one transaction, without an intent
// (one fsync per Allocate instead of two), and a crash after it is the
// crash after step 4 below.
//
// An intent still open at start means the kubelet never had the answer
// (gRPC sends it after Allocate returns): repair frees the claim. A crash
// after step 4 and before the answer reached the kubelet leaves a claim
// that no pod lists: the device plugin frees it after the grace period.

// podClaimIntent is the data of a pod-claim intent.
type podClaimIntent struct {
	Claim    string   `json:"claim"`
	Resource string   `json:"resource"`
	VGPUs    []string `json:"vgpus"`
}

// ClaimPod gives a pod's container the vGPUs ids of req.Profile, as the
// kubelet picked them from those advertised under req.Pod.Resource.
// req.DomainUUID is the claim's own id (a fresh UUID) and req.DomainName a
// label for messages. Every id must be a vGPU of the profile on this host,
// not held by a domain, a lease, another pod or a process outside vgpud;
// else nothing is claimed and the error says which and why. A caller gone
// (ctx done) before the claim's first write changes nothing (change.Bind);
// one gone after it, before the answer, gets nothing either: its claim is
// revoked, while the kernel work begun for it (a VF made ready) finishes.
func (e *Engine) ClaimPod(kubelet context.Context, req alloc.Request, ids []string) (g api.PodGrant, err error) {
	ctx := change.Bind(kubelet, nil)
	defer func(start time.Time) { observe(e.metrics, opAllocate, start, err) }(time.Now())
	if req.Pod == nil {
		return g, fmt.Errorf("%w: a pod claim without its pod", alloc.ErrInvalid)
	}
	if req.Count == 0 {
		req.Count = len(ids)
	}
	canon := make([]string, len(ids))
	for i, id := range ids {
		if canon[i], err = alloc.VGPUID(id); err != nil {
			return g, err
		}
	}
	e.host.Lock()
	defer e.host.Unlock()
	if err := ctx.Err(); err != nil { // waited for the lock behind a reconcile
		return g, fmt.Errorf("claim %v for %s: the kubelet gave up waiting: %w", canon, req.Pod.Resource, err)
	}
	if p, ok := e.catalog.Get(req.Profile); ok && !p.TakesVGPUParams() {
		var nodes []string
		ready := func() (err error) { // in the claim's transaction
			if err := kubelet.Err(); err != nil {
				return fmt.Errorf("claim %v for %s: the kubelet went away before the answer: %w", canon, req.Pod.Resource, err)
			}
			nodes, err = e.vfioNodes(canon)
			return err
		}
		as, kernel, err := e.claimPod(ctx, req, canon, func(cs []alloc.Candidate) ([]ledger.Allocation, error) {
			return e.alloc.ClaimAttach(ctx, req, canon, cs, ready)
		})
		if kernel {
			defer e.invalidate()
		}
		if err != nil {
			return g, err // nothing committed
		}
		e.log.Info("claimed for a pod", "resource", req.Pod.Resource, "claim", req.DomainUUID, "profile", req.Profile, "vgpus", idList(as))
		return api.PodGrant{Allocations: apiAllocations(nil, as), DeviceNodes: nodes}, nil
	}
	var intent uint64
	begin := func(tx *ledger.Tx) (err error) {
		intent, err = tx.BeginIntentData(ledger.IntentPodClaim, pci.Address{}, "claim "+req.DomainUUID+" for "+req.Pod.Resource,
			podClaimIntent{Claim: req.DomainUUID, Resource: req.Pod.Resource, VGPUs: canon})
		return err
	}
	as, kernel, err := e.claimPod(ctx, req, canon, func(cs []alloc.Candidate) ([]ledger.Allocation, error) {
		return e.alloc.ClaimWith(ctx, req, canon, cs, begin)
	})
	if kernel {
		defer e.invalidate()
	}
	if err != nil {
		return g, err // the claim's transaction, intent and all, did not commit
	}
	undo := func(cause error) error {
		_, ferr := e.alloc.Revoke(ctx, as)
		if ferr == nil {
			ferr = e.ledger.EndIntent(intent)
		}
		return errors.Join(cause, ferr)
	}
	if err := e.writeParams(ctx, req.Profile, canon); err != nil {
		return g, undo(err)
	}
	if err := kubelet.Err(); err != nil {
		return g, undo(fmt.Errorf("claim %v for %s: the kubelet went away before the answer: %w", canon, req.Pod.Resource, err))
	}
	nodes, err := e.vfioNodes(canon)
	if err != nil {
		return g, undo(err)
	}
	err = e.ledger.Update(func(tx *ledger.Tx) error {
		for i, a := range as {
			if as[i], err = tx.SetState(a.VGPU, ledger.StateAttached); err != nil {
				return err
			}
		}
		return tx.EndIntent(intent)
	})
	if err != nil {
		return g, undo(err)
	}
	e.log.Info("claimed for a pod", "resource", req.Pod.Resource, "claim", req.DomainUUID, "profile", req.Profile, "vgpus", idList(as))
	return api.PodGrant{Allocations: apiAllocations(nil, as), DeviceNodes: nodes}, nil
}

// claimPod makes drifted VFs ready and claims canon through claim, given
// the candidates; kernel reports whether it changed the kernel. e.host is
// held.
func (e *Engine) claimPod(ctx context.Context, req alloc.Request, canon []string, claim func([]alloc.Candidate) ([]ledger.Allocation, error)) (as []ledger.Allocation, kernel bool, err error) {
	owners, _, err := e.prepareScope(req, canon)
	if err != nil {
		return nil, false, err
	}
	v, err := e.viewOf(ctx, owners)
	if err != nil {
		return nil, false, err
	}
	for _, id := range canon {
		if x, ok := v.vgpu(id); ok && e.Changing(x.GPU) {
			return nil, false, fmt.Errorf("claim %s for %s: %w (%s); the kubelet retries with another pod start",
				id, req.Pod.Resource, ErrChanging, x.GPU)
		}
	}
	// A VF that drifted (off its VFIO driver, NVIDIA type cleared) is made
	// ready again, as prepare does; one that does not qualify is left to
	// Claim's refusal. Made ready and not claimed (a refusal, a crash),
	// it is simply ready in the pool.
	for _, id := range canon {
		if _, ok := v.vgpu(id); ok || isUUID(id) {
			continue
		}
		// The first write: from here the claim finishes or undoes
		// itself, whether the kubelet waits or not.
		if err := change.Begin(ctx); err != nil {
			return nil, kernel, err
		}
		done, err := e.readyVF(ctx, v, req, id)
		if err != nil {
			return nil, kernel, err
		}
		kernel = kernel || done
	}
	if kernel {
		if v, err = e.viewOf(ctx, owners); err != nil {
			return nil, kernel, err
		}
	}
	// Only the vGPUs the kubelet named may be taken: check those alone.
	cs, err := e.candidates(ctx, v, req.Profile, func(id string) bool { return slices.Contains(canon, id) })
	if err != nil {
		return nil, kernel, err
	}
	as, err = claim(cs)
	return as, kernel, err
}

// vfioNodes are the device nodes a VM's QEMU opens for the vGPUs ids,
// those the host has as character devices: /dev/vfio/vfio (the container),
// each vGPU's group, its iommufd cdev (/dev/vfio/devices/vfioN) and
// /dev/iommu. A simulated host's nodes (vgpusim over FUSE) are plain
// files: none.
func (e *Engine) vfioNodes(ids []string) ([]string, error) {
	var out []string
	add := func(p string) error {
		if slices.Contains(out, p) {
			return nil
		}
		fi, err := e.fs.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return fmt.Errorf("look for device node %s: %w", p, err)
		case fi.Mode()&fs.ModeCharDevice != 0:
			out = append(out, p)
		}
		return nil
	}
	if err := add(sysfs.VFIODev + "/vfio"); err != nil {
		return nil, err
	}
	for _, id := range ids {
		dir := sysfs.MdevDevices + "/" + id
		if !isUUID(id) {
			addr, err := pci.ParseAddress(id)
			if err != nil {
				return nil, err
			}
			dir = pci.DevicePath(addr)
		}
		group, ok, err := sysfs.LinkBase(e.fs, dir+"/iommu_group")
		if err == nil && !ok {
			err = fs.ErrNotExist
		}
		if err != nil {
			return nil, fmt.Errorf("read the IOMMU group of vGPU %s (%s/iommu_group): %w", id, dir, err)
		}
		if _, err := strconv.Atoi(group); err != nil {
			return nil, fmt.Errorf("read the IOMMU group of vGPU %s: %s/iommu_group names %q", id, dir, group)
		}
		if err := add(sysfs.VFIODev + "/" + group); err != nil {
			return nil, err
		}
		cdevs, err := sysfs.Names(e.fs, dir+"/vfio-dev")
		if err != nil {
			return nil, fmt.Errorf("list the VFIO cdevs of vGPU %s: %w", id, err)
		}
		for _, c := range cdevs {
			if err := add(sysfs.VFIODevices + "/" + c); err != nil {
				return nil, err
			}
		}
	}
	if err := add("/dev/iommu"); err != nil {
		return nil, err
	}
	return out, nil
}

// NamePod records which pod's container holds a claim's vGPU, once the
// kubelet's PodResources lists it; label is what messages call it.
func (e *Engine) NamePod(ctx context.Context, claim, vgpu string, pod ledger.Pod, label string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return e.ledger.Update(func(tx *ledger.Tx) error {
		if err := change.Begin(ctx); err != nil {
			return err
		}
		a, ok, err := tx.Allocation(vgpu)
		if err != nil || !ok || a.DomainUUID != claim || a.Pod == nil {
			return err
		}
		if *a.Pod == pod && a.DomainName == label {
			return nil
		}
		a.Pod, a.DomainName = &pod, label
		return tx.PutAllocation(a)
	})
}

// PreferPod chooses size vGPUs of profile among available for the
// kubelet's GetPreferredAllocation, by the allocator's rules (alloc.Prefer):
// must first, NUMA-local, least-loaded GPUs. It holds nothing.
func (e *Engine) PreferPod(ctx context.Context, profile string, available, must []string, size int) ([]string, error) {
	v, err := e.currentView(ctx, false)
	if err != nil {
		return nil, err
	}
	cs, err := e.candidates(ctx, v, profile, nil)
	if err != nil {
		return nil, err
	}
	return e.alloc.Prefer(ctx, profile, cs, available, must, size)
}

// repairPodClaim frees a claim whose answer the kubelet never had: its
// intent was open at start. A vGPU a VFIO user holds is kept (logged).
func (e *Engine) repairPodClaim(ctx context.Context, in ledger.Intent) (string, error) {
	var pi podClaimIntent
	if err := json.Unmarshal(in.Data, &pi); err != nil {
		return "", fmt.Errorf("repair intent %s: decode its data: %w", in, err)
	}
	if err := e.demoteUnplugged(ctx, pi.Claim, ""); err != nil {
		return "", fmt.Errorf("repair intent %s: %w", in, err)
	}
	as, err := e.alloc.Unreserve(ctx, pi.Claim, "")
	if err != nil {
		return "", fmt.Errorf("repair intent %s: free the claim the kubelet never had an answer for: %w", in, err)
	}
	if err := e.ledger.EndIntent(in.ID); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: the kubelet never had vgpud's answer, so no pod holds them: freed %d vGPUs (%s)", in, len(as), idList(as)), nil
}

// PodVGPU is a vGPU as the kubelet's device plugin relists it after every
// change: what it advertises, and no more (an api.VGPU is 288 bytes, and
// a large host has a thousand vGPUs).
type PodVGPU struct {
	ID, GPU, Profile string
	NUMANode         int    // -1: not known
	State            string // api.StateFree, or the ledger's state (api.StateLeased for a lease)
	// Pod is the pod holding it (its allocation's), nil for none.
	Pod *ledger.Pod
	// InUse: a process holds its VFIO group (or cdev).
	InUse bool
	// UseUnknown: nobody visible holds it, but a process whose open files
	// cannot be read (vgpud without CAP_SYS_PTRACE) may.
	UseUnknown bool
}

// PodVGPUs lists the host's vGPUs for the kubelet's device plugin, as
// VGPUs does but at the cost of one /proc scan: a vGPU's VFIO users are
// looked up by the IOMMU group its view holds, and its iommufd cdevs are
// read only when some process holds a cdev. The plugin lists them after
// every change, on hosts of a thousand vGPUs.
func (e *Engine) PodVGPUs(ctx context.Context) ([]PodVGPU, error) {
	return e.podVGPUs(ctx, nil, nil)
}

// PodVGPUsOf lists, as PodVGPUs does, the vGPUs ids that are on the host
// and every vGPU a process holds or may hold (InUse, UseUnknown): what
// the plugin needs after a Change that named ids, as a process's open
// files change without a Change. It reads the cached view however old
// (a Change that names vGPUs changed only the ledger, and every kernel
// change drops the view): the discovery of a whole host once its TTL runs
// out is left to PodVGPUs, which the plugin calls on its own schedule,
// not after each claim and free.
func (e *Engine) PodVGPUsOf(ctx context.Context, ids []string) ([]PodVGPU, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	e.viewMu.Lock()
	v := e.view
	e.viewMu.Unlock()
	return e.podVGPUs(ctx, v, want)
}

// podVGPUs lists the vGPUs of view v (nil: the current view) that want
// names and those held or maybe held; all of them when want is nil.
func (e *Engine) podVGPUs(ctx context.Context, v *hostView, want map[string]bool) ([]PodVGPU, error) {
	if v == nil {
		var err error
		if v, err = e.currentView(ctx, false); err != nil {
			return nil, err
		}
	}
	hs, err := pci.ScanHolders(e.fs)
	if err != nil {
		return nil, err
	}
	cdevs := hs.AnyCdev()
	allocs, leases, err := e.held()
	if err != nil {
		return nil, err
	}
	byID := make(map[string]*ledger.Allocation, len(allocs))
	for i := range allocs {
		byID[allocs[i].VGPU] = &allocs[i]
	}
	leased := make(map[string]bool, len(leases))
	for _, l := range leases {
		leased[l.VGPU] = true
	}
	numa := make(map[string]int, len(v.gpus))
	for i, g := range v.gpus {
		numa[v.addrs[i]] = g.NUMANode
	}
	unknown := len(hs.Unreadable) > 0
	// Sized for what is asked: an update after a claim asks for a few of
	// a thousand vGPUs, and a list of them all per claim is the most of
	// its garbage.
	var out []PodVGPU
	if want != nil {
		out = make([]PodVGPU, 0, len(want))
	} else {
		out = make([]PodVGPU, 0, len(v.vgpus))
	}
	for _, x := range v.vgpus {
		if want != nil && !want[x.ID] && x.IOMMUGroup < 0 {
			continue // nothing can hold it: no need to look
		}
		n, ok := numa[x.GPU]
		if !ok {
			n = -1
		}
		r := PodVGPU{ID: x.ID, GPU: x.GPU, Profile: x.Profile, NUMANode: n, State: api.StateFree}
		if a, ok := byID[x.ID]; ok {
			r.State, r.Pod = string(a.State), a.Pod
		} else if leased[x.ID] {
			r.State = api.StateLeased
		}
		if x.IOMMUGroup >= 0 {
			of := hs.OfGroup(x.IOMMUGroup)
			if cdevs { // its cdev, too: read its vfio-dev
				dir := sysfs.MdevDevices + "/" + x.ID
				if a, err := pci.ParseAddress(x.ID); err == nil {
					dir = pci.DevicePath(a)
				}
				if of, err = hs.Of(e.fs, dir, x.IOMMUGroup); err != nil {
					return nil, fmt.Errorf("check whether vGPU %s is in use: %w", x.ID, err)
				}
			}
			r.InUse = len(of) > 0
			r.UseUnknown = !r.InUse && unknown
		}
		if want != nil && !want[x.ID] && !r.InUse && !r.UseUnknown {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}
