package attachtest

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/attach"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Reserver is vgpud's ledger in miniature: a pool of VFs per profile,
// reservations per domain, and the error vgpud gives when the pool is dry.
type Reserver struct {
	Pool     map[string][]attach.Reserved // profile -> its vGPUs, in the order vgpud would pick
	Held     map[string][]string          // domain UUID -> ids
	FailNext error                        // the next Reserve or Release fails with it
	// FailRelease: every Release fails with it (vgpud gone mid-attach).
	FailRelease error
	Calls       []string
}

var _ attach.Reserver = (*Reserver)(nil)

// NewReserver has four VFs of mi25-4g and two NVIDIA VFs of l40s-12q.
func NewReserver() *Reserver {
	vfs := func(kind vgpu.Kind, addrs ...string) []attach.Reserved {
		var out []attach.Reserved
		for _, a := range addrs {
			out = append(out, attach.Reserved{ID: a, Kind: kind, Address: pci.MustParseAddress(a)})
		}
		return out
	}
	return &Reserver{
		Pool: map[string][]attach.Reserved{
			"mi25-4g":  vfs(vgpu.KindVF, "0000:03:00.1", "0000:03:00.2", "0000:03:00.3", "0000:03:00.4"),
			"l40s-12q": vfs(vgpu.KindNVIDIAVF, "0000:86:00.4", "0000:86:00.5"),
		},
		Held: map[string][]string{},
	}
}

func (f *Reserver) owner(id string) string {
	for d, ids := range f.Held {
		if slices.Contains(ids, id) {
			return d
		}
	}
	return ""
}

// Reserve implements attach.Reserver.
func (f *Reserver) Reserve(_ context.Context, domainUUID, _, profile string, count int) ([]attach.Reserved, error) {
	f.Calls = append(f.Calls, fmt.Sprintf("reserve %s %d", profile, count))
	if err := f.FailNext; err != nil {
		f.FailNext = nil
		return nil, err
	}
	var mine, free []attach.Reserved
	for _, r := range f.Pool[profile] {
		switch f.owner(r.ID) {
		case domainUUID:
			mine = append(mine, r)
		case "":
			free = append(free, r)
		}
	}
	if need := count - len(mine); need > len(free) {
		return nil, fmt.Errorf("no free vGPU of profile %s (%d of %d in use)", profile, len(f.Pool[profile])-len(free), len(f.Pool[profile]))
	}
	for len(mine) < count {
		mine, free = append(mine, free[0]), free[1:]
		f.Held[domainUUID] = append(f.Held[domainUUID], mine[len(mine)-1].ID)
	}
	return mine, nil
}

// Release implements attach.Reserver.
func (f *Reserver) Release(_ context.Context, domainUUID string, ids []string) ([]string, error) {
	f.Calls = append(f.Calls, "release "+strings.Join(ids, ","))
	if err := f.FailNext; err != nil {
		f.FailNext = nil
		return nil, err
	}
	if f.FailRelease != nil {
		return nil, f.FailRelease
	}
	var released []string
	f.Held[domainUUID] = slices.DeleteFunc(f.Held[domainUUID], func(id string) bool {
		if slices.Contains(ids, id) {
			released = append(released, id)
			return true
		}
		return false
	})
	return released, nil
}

// Prepare implements attach.Reserver.
func (f *Reserver) Prepare(_ context.Context, domainUUID, _, profile string, ids []string) error {
	f.Calls = append(f.Calls, "prepare "+profile+" "+strings.Join(ids, ","))
	for _, id := range ids {
		if f.owner(id) != domainUUID {
			return fmt.Errorf("vGPU %s is not the domain's", id)
		}
	}
	return nil
}
