package deviceplugin

import (
	"context"

	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

// Engine is what the device plugin asks of vgpud's engine: the same
// ledger and host the libvirt hook's API serves, so a vGPU is never a
// pod's and a domain's at once. *engine.Engine is one.
type Engine interface {
	// PodVGPUs lists the host's vGPUs with who holds them (ledger) and
	// whether a process outside the ledger holds them, cheaply enough to
	// be asked after every change.
	PodVGPUs(ctx context.Context) ([]engine.PodVGPU, error)
	// PodVGPUsOf lists, as PodVGPUs, the vGPUs ids on the host and every
	// vGPU a process holds or may hold: the plugin's update after a
	// Change that named vGPUs.
	PodVGPUsOf(ctx context.Context, ids []string) ([]engine.PodVGPU, error)
	// GPUAddresses lists the host's GPUs' PCI addresses: a vGPU gone with
	// its GPU is unhealthy, one gone by an uncarve is simply gone.
	GPUAddresses(ctx context.Context) ([]string, error)
	// Holdings lists the allocations (domainUUID ""), pods' among them,
	// those whose vGPU is no longer on the host too.
	Holdings(ctx context.Context, domainUUID string) (api.Holdings, error)
	// Catalog is the profile catalog (NVIDIA's type names).
	Catalog() *profile.Catalog
	// ClaimPod claims and makes ready the vGPUs ids for a pod's container
	// (req.Pod set, req.DomainUUID the claim's id), or claims nothing.
	ClaimPod(ctx context.Context, req alloc.Request, ids []string) (api.PodGrant, error)
	// Unreserve frees a claim's vGPU (or all of it with vgpu ""); one a
	// VFIO user holds is refused with alloc.ErrAttached.
	Unreserve(ctx context.Context, domainUUID, vgpu string) (api.Holdings, error)
	// NamePod records the pod's container that holds a claim's vGPU.
	NamePod(ctx context.Context, claim, vgpu string, pod ledger.Pod, label string) error
	// PreferPod chooses size of available (must first) by the allocator's
	// rules: NUMA-local, least-loaded GPUs.
	PreferPod(ctx context.Context, profile string, available, must []string, size int) ([]string, error)
	// Changes wakes the plugin after every change of the host or the
	// ledger (carve, uncarve, claim, free, a device gone from the bus) and
	// says which vGPUs changed, or that any may have.
	Changes() *engine.Subscription
}
