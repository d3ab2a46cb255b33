package domxml

import (
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// ErrInvalid: a request element, a vGPU or a domain XML breaks our rules.
var ErrInvalid = errors.New("invalid vgpu domain XML")

// VGPU is one vGPU of a domain: what its hostdev points at and how our
// metadata records it.
type VGPU struct {
	// Index is the vGPU's place in the domain's request, from 0. It seeds
	// the mdev UUID, so it never changes while the vGPU is attached.
	Index int       `json:"index"`
	Kind  vgpu.Kind `json:"kind"`
	// Address is the PCI function of a vf, nvidia-vf or pf vGPU.
	Address pci.Address `json:"address,omitzero"`
	// UUID is the mdev UUID of an mdev vGPU.
	UUID string `json:"uuid,omitempty"`
}

// ID names the vGPU as vgpud and vgpuctl vgpus do: the PCI address, or the
// mdev UUID.
func (v VGPU) ID() string {
	if v.Kind == vgpu.KindMdev {
		return v.UUID
	}
	return v.Address.String()
}

// IsPCI reports whether the vGPU reaches the VM as a PCI hostdev (vf,
// nvidia-vf, pf) rather than an mdev.
func (v VGPU) IsPCI() bool { return v.Kind != vgpu.KindMdev }

func (v VGPU) String() string { return fmt.Sprintf("%s %s", v.Kind, v.ID()) }

// PCIVGPU is a vf, nvidia-vf or pf vGPU at addr.
func PCIVGPU(index int, kind vgpu.Kind, addr pci.Address) VGPU {
	return VGPU{Index: index, Kind: kind, Address: addr}
}

// MdevVGPU is the index-th mdev vGPU of the domain, with its deterministic
// UUID (MdevUUID).
func MdevVGPU(domainUUID string, index int) (VGPU, error) {
	u, err := MdevUUID(domainUUID, index)
	if err != nil {
		return VGPU{}, err
	}
	return VGPU{Index: index, Kind: vgpu.KindMdev, UUID: u}, nil
}

// ParseVGPU reads a vGPU from its kind and id as the metadata stores them.
// PCI addresses and UUIDs come back in canonical form.
func ParseVGPU(index int, kind, id string) (VGPU, error) {
	v := VGPU{Index: index, Kind: vgpu.Kind(kind)}
	if index < 0 || index >= MaxCount {
		return v, fmt.Errorf("%w: vGPU index %d: want 0 to %d", ErrInvalid, index, MaxCount-1)
	}
	switch v.Kind {
	case vgpu.KindMdev:
		u, err := canonicalUUID(id)
		if err != nil {
			return v, fmt.Errorf("%w: mdev vGPU %d: %q is not a UUID", ErrInvalid, index, id)
		}
		v.UUID = u
	case vgpu.KindVF, vgpu.KindNVIDIAVF, vgpu.KindPF:
		a, err := pci.ParseAddress(id)
		if err != nil {
			return v, fmt.Errorf("%w: %s vGPU %d: %w", ErrInvalid, kind, index, err)
		}
		v.Address = a
	default:
		return v, fmt.Errorf("%w: vGPU %d: unknown kind %q (want %s, %s, %s or %s)", ErrInvalid, index, kind,
			vgpu.KindVF, vgpu.KindMdev, vgpu.KindNVIDIAVF, vgpu.KindPF)
	}
	return v, nil
}

// sameShape reports whether a hostdev built for a can be pointed at b by
// rewriting its source: both PCI, or both mdev.
func sameShape(a, b VGPU) bool { return a.IsPCI() == b.IsPCI() }

// mdevNamespace seeds the UUIDs of the mdevs handed to domains. It is
// derived from our XML namespace, so it is ours and reproducible.
var mdevNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte(Namespace))

// MdevUUID is the UUID of the index-th mdev vGPU of a domain: a name-based
// (v5) UUID of the domain UUID and the index. A restart, a restore and a
// migration of the domain reuse the same identity without any state.
func MdevUUID(domainUUID string, index int) (string, error) {
	d, err := canonicalUUID(domainUUID)
	if err != nil {
		return "", fmt.Errorf("%w: domain UUID %q is not a UUID", ErrInvalid, domainUUID)
	}
	if index < 0 || index >= MaxCount {
		return "", fmt.Errorf("%w: mdev index %d: want 0 to %d", ErrInvalid, index, MaxCount-1)
	}
	return uuid.NewSHA1(mdevNamespace, fmt.Appendf(nil, "%s/%d", d, index)).String(), nil
}

// canonicalUUID accepts only the 36-character form libvirt writes, in
// either case, and returns it in lower case.
func canonicalUUID(s string) (string, error) {
	if len(s) != 36 {
		return "", errors.New("not a UUID")
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}
