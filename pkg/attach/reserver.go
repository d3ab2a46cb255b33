package attach

import (
	"context"
	"errors"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Reserver is what attach and detach ask of vgpud: reservations in its
// ledger of the vGPUs a domain's hostdevs name. A VF-based vGPU (vf,
// nvidia-vf, pf) needs one at attach, for its hostdev carries the VF's
// address; an mdev does not, for its UUID derives from the domain and
// vgpud creates it at VM start. A nil Reserver is a host without vgpud.
type Reserver interface {
	// Reserve makes the domain hold count vGPUs of profile in total, what
	// it holds already included (asking again returns the same ones), and
	// returns all of them.
	Reserve(ctx context.Context, domainUUID, domainName, profile string, count int) ([]Reserved, error)
	// Release gives these reservations of the domain back to the pool and
	// returns the ids it held; an id it does not hold is not an error.
	Release(ctx context.Context, domainUUID string, ids []string) (released []string, err error)
	// Prepare makes the domain's reserved ids ready for its running VM (a
	// VF on vfio-pci, an NVIDIA type written) and marks them attached, as
	// the hook's prepare does at start: attach --live hotplugs them next.
	Prepare(ctx context.Context, domainUUID, domainName, profile string, ids []string) error
}

// Reserved is one vGPU vgpud holds for a domain.
type Reserved struct {
	ID      string      `json:"id"`
	Kind    vgpu.Kind   `json:"kind"`
	Address pci.Address `json:"address,omitzero"` // vf, nvidia-vf, pf
	UUID    string      `json:"uuid,omitempty"`   // mdev
}

// VgpudReserver reserves through vgpud's API.
type VgpudReserver struct{ Client *client.Client }

var _ Reserver = VgpudReserver{}

// Reserve implements Reserver.
func (r VgpudReserver) Reserve(ctx context.Context, domainUUID, domainName, prof string, count int) ([]Reserved, error) {
	h, err := r.Client.Reserve(ctx, domainUUID, api.ReserveRequest{Name: domainName, Profile: prof, Count: count})
	if err != nil {
		return nil, err
	}
	out := make([]Reserved, len(h.Allocations))
	for i, a := range h.Allocations {
		out[i] = Reserved{ID: a.VGPU, Kind: vgpu.Kind(a.Kind)}
		if a.Kind == string(vgpu.KindMdev) {
			out[i].UUID = a.VGPU
		} else if addr, err := pci.ParseAddress(a.VGPU); err == nil {
			out[i].Address = addr
		}
	}
	return out, nil
}

// Prepare implements Reserver.
func (r VgpudReserver) Prepare(ctx context.Context, domainUUID, domainName, prof string, ids []string) error {
	_, err := r.Client.Prepare(ctx, domainUUID, api.PrepareRequest{Name: domainName, Profile: prof, Count: len(ids), VGPUs: ids})
	return err
}

// Release implements Reserver: each id is unreserved; one the domain no
// longer holds is not an error.
func (r VgpudReserver) Release(ctx context.Context, domainUUID string, ids []string) ([]string, error) {
	var errs []error
	var released []string
	for _, id := range ids {
		h, err := r.Client.Unreserve(ctx, domainUUID, id)
		switch {
		case errors.Is(err, client.ErrNotFound):
		case err != nil:
			errs = append(errs, err)
		default:
			for _, a := range h.Allocations {
				released = append(released, a.VGPU)
			}
		}
	}
	return released, errors.Join(errs...)
}
