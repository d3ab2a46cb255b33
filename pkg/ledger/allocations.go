package ledger

import (
	"fmt"
	"slices"
	"time"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// State is where an allocation is in a VM's life.
type State string

const (
	// StateReserved: chosen for a domain whose VM has not started yet.
	StateReserved State = "reserved"
	// StateAttached: the domain's VM runs with it.
	StateAttached State = "attached"
	// StateReleasing: the VM stopped and the release (per policy) is under
	// way; the allocation goes once it is done.
	StateReleasing State = "releasing"
	// StateMigrating: the domain's VM runs with it and is migrating to
	// another host (vgpuctl migrate); nothing else touches it until the
	// migration ends: freed on success, attached again on failure.
	StateMigrating State = "migrating"
)

// Valid reports whether s is one of the states.
func (s State) Valid() bool {
	return s == StateReserved || s == StateAttached || s == StateReleasing || s == StateMigrating
}

// Holds reports whether a vGPU in state s is in use: a reserved vGPU is
// promised to a VM about to start; a releasing one is on its way out.
func (s State) Holds() bool { return s == StateReserved || s == StateAttached || s == StateMigrating }

// Allocation is one vGPU given to one domain.
type Allocation struct {
	// VGPU is the vGPU's id: its device address, or the mdev UUID.
	VGPU string      `json:"vgpu"`
	GPU  pci.Address `json:"gpu"`
	// Parent names the virtual mdev parent (mbochs) of an mdev that has no
	// GPU behind it; GPU is then zero.
	Parent     string `json:"parent,omitempty"`
	Profile    string `json:"profile"`
	DomainUUID string `json:"domainUUID"`
	DomainName string `json:"domainName"`
	State      State  `json:"state"`
	// Since is when the allocation entered State.
	Since time.Time `json:"since"`
	// Incoming: made from a lease, for a domain that migrated in. Should
	// the domain vanish (its incoming migration failed), the allocation
	// goes without a grace period and its mdev is recreated.
	Incoming bool `json:"incoming,omitempty"`
	// Pod, when set, says a pod's container holds the vGPU, given by the
	// kubelet's device manager through vgpud's device plugin, not a libvirt
	// domain: DomainUUID is then the id of that one allocation (a claim),
	// DomainName says which pod. Those are freed when the kubelet's
	// PodResources no longer lists them, never by libvirt's domains.
	Pod *Pod `json:"pod,omitempty"`
}

// HolderKind is what kind of consumer holds a vGPU. One vGPU has one
// holder of one kind at a time: the ledger keys allocations by vGPU.
type HolderKind string

const (
	// HolderDomain: a libvirt domain (vgpuctl attach, the hook).
	HolderDomain HolderKind = "domain"
	// HolderPod: a container of a Kubernetes pod (the kubelet's device
	// manager, through vgpud's device plugin).
	HolderPod HolderKind = "pod"
)

// Pod is the pod's container a vGPU was allocated to by the kubelet.
type Pod struct {
	// Resource is the extended resource the kubelet allocated it under
	// (vgpu.example.org/l40s-12q).
	Resource string `json:"resource"`
	// Namespace, Name and Container say which pod holds it, once the
	// kubelet's PodResources lists it; "" before (the kubelet's Allocate
	// does not say).
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Container string `json:"container,omitempty"`
}

// String names the pod's container, or the resource while the kubelet
// has not listed it yet.
func (p Pod) String() string {
	if p.Name == "" {
		return "a container the kubelet allocated " + p.Resource + " to (not listed by its PodResources yet)"
	}
	return fmt.Sprintf("pod %s/%s container %s", p.Namespace, p.Name, p.Container)
}

// HolderKind says whether a domain or a pod holds the vGPU.
func (a Allocation) HolderKind() HolderKind {
	if a.Pod != nil {
		return HolderPod
	}
	return HolderDomain
}

// Owner is what the vGPU is carved on: its GPU's address, or the name of
// its virtual mdev parent.
func (a Allocation) Owner() string { return vgpu.Target{GPU: a.GPU, Parent: a.Parent}.String() }

// ParseOwner splits an owner (a GPU's address, or a virtual mdev parent's
// name, as vgpu.VGPU.GPU holds it) into a record's GPU and Parent. Any
// other string is an error (vgpu.ParseTarget's rule), so that no record
// names an owner the CLI and the config would refuse.
func ParseOwner(s string) (gpu pci.Address, parent string, err error) {
	t, err := vgpu.ParseTarget(s)
	if err != nil {
		return pci.Address{}, "", fmt.Errorf("read the owner of a vGPU: %w", err)
	}
	return t.GPU, t.Parent, nil
}

// Holder says who holds the vGPU, for messages.
func (a Allocation) Holder() string {
	verb := "attached to"
	switch a.State {
	case StateReserved:
		verb = "reserved for"
	case StateReleasing:
		verb = "being released by"
	case StateMigrating:
		verb = "migrating out with"
	}
	if a.Pod != nil {
		return fmt.Sprintf("%s %s (kubelet allocation %s)", verb, a.Pod, a.DomainUUID)
	}
	return fmt.Sprintf("%s domain %s (%s)", verb, a.DomainName, a.DomainUUID)
}

// Allocation returns the allocation of vGPU vgpu.
func (t *Tx) Allocation(vgpu string) (Allocation, bool, error) {
	var a Allocation
	ok, err := t.get(bucketAllocations, vgpu, &a)
	return a, ok, err
}

// Allocations returns every allocation, sorted by vGPU id.
func (t *Tx) Allocations() ([]Allocation, error) {
	return records[Allocation](t, bucketAllocations, nil)
}

// DomainAllocations returns the allocations of one domain.
func (t *Tx) DomainAllocations(domainUUID string) ([]Allocation, error) {
	all, err := t.Allocations()
	return slices.DeleteFunc(all, func(a Allocation) bool { return a.DomainUUID != domainUUID }), err
}

// PutAllocation records a, replacing any allocation of the same vGPU. A
// zero Since is stamped with the ledger's clock.
func (t *Tx) PutAllocation(a Allocation) error {
	if a.VGPU == "" || a.DomainUUID == "" || !a.State.Valid() {
		return t.wrap("record an allocation", fmt.Errorf("incomplete allocation %+v (need a vGPU, a domain UUID and a state)", a))
	}
	if a.Since.IsZero() {
		a.Since = t.Now()
	}
	return t.put(bucketAllocations, a.VGPU, a)
}

// SetState moves the allocation of vgpu to st, restamping Since.
func (t *Tx) SetState(vgpu string, st State) (Allocation, error) {
	a, ok, err := t.Allocation(vgpu)
	if err != nil {
		return a, err
	}
	if !ok {
		return a, t.wrap("set the state of "+vgpu, fmt.Errorf("%w: %s is not allocated", ErrNotFound, vgpu))
	}
	if a.State == st {
		return a, nil
	}
	a.State, a.Since = st, t.Now()
	return a, t.PutAllocation(a)
}

// DeleteAllocation frees vgpu and returns what it was; ok is false when it
// was not allocated.
func (t *Tx) DeleteAllocation(vgpu string) (a Allocation, ok bool, err error) {
	if a, ok, err = t.Allocation(vgpu); err != nil || !ok {
		return a, ok, err
	}
	return a, true, t.delete(bucketAllocations, vgpu)
}

// Allocation returns the allocation of vGPU vgpu.
func (l *Ledger) Allocation(vgpu string) (Allocation, bool, error) {
	return viewLookup(l, func(tx *Tx) (Allocation, bool, error) { return tx.Allocation(vgpu) })
}

// Allocations returns every allocation, sorted by vGPU id.
func (l *Ledger) Allocations() ([]Allocation, error) {
	return viewValue(l, (*Tx).Allocations)
}

// SetState moves the allocation of vgpu to st.
func (l *Ledger) SetState(vgpu string, st State) (Allocation, error) {
	return updateValue(l, func(tx *Tx) (Allocation, error) { return tx.SetState(vgpu, st) })
}
