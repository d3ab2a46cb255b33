package alloc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

// MaxCount is the most vGPUs one request may ask for: 4 GPUs split 16 ways.
// It only guards against nonsense; no real VM comes near it.
const MaxCount = 64

// Sentinels the API layer maps to status codes with errors.Is.
var (
	// ErrInvalid: the request is malformed (400). ErrBadDomainUUID,
	// ErrBadDomainName, ErrBadCount and ErrBadVGPU errors match it too.
	ErrInvalid       = errors.New("invalid request")
	ErrBadDomainUUID = errors.New("bad domain UUID")
	ErrBadDomainName = errors.New("bad domain name")
	ErrBadCount      = errors.New("bad vGPU count")
	ErrBadVGPU       = errors.New("bad vGPU id")
	// ErrUnknownProfile: no profile has that name (404). It is the
	// catalog's own sentinel, so one errors.Is serves both packages.
	ErrUnknownProfile = profile.ErrUnknownProfile
	// ErrNoCapacity: not enough free vGPUs of the profile (409).
	ErrNoCapacity = errors.New("not enough free vGPUs")
	// ErrConflict: the domain already holds more of the profile than asked,
	// or holds allocations where a lease was asked for (409).
	ErrConflict = errors.New("conflicting holdings")
	// ErrNotAllocated: the domain holds no vGPU here (404).
	ErrNotAllocated = errors.New("domain holds no vGPU")
	// ErrNoSuchVGPU: a vGPU named by id is not one of the host's vGPUs of
	// the profile (404).
	ErrNoSuchVGPU = errors.New("no such vGPU")
	// ErrAttached: the vGPU is attached to a running VM; stop it first (409).
	// Errors matching it match ErrConflict too.
	ErrAttached = errors.New("vGPU attached to a running VM")
)

// Request asks for Count vGPUs of Profile for one domain.
type Request struct {
	Profile string `json:"profile"`
	Count   int    `json:"count"`
	// NUMANode, when set, restricts the choice to GPUs on that node. It is
	// strict: with none free there the request fails rather than crossing
	// nodes, since a VM pinned to a node wants its GPU memory traffic local,
	// and the caller can retry without it. GPUs that report no node (-1)
	// never satisfy it.
	NUMANode   *int   `json:"numaNode,omitempty"`
	DomainUUID string `json:"domainUUID"`
	DomainName string `json:"domainName"`
	// Pod, when set, asks for a pod's container rather than a libvirt
	// domain (ledger.Allocation.Pod): DomainUUID is then the claim's own
	// id and DomainName a label for messages ("pod default/vm1 container
	// compute"), which may hold '/'.
	Pod *ledger.Pod `json:"pod,omitempty"`
}

// refusal is a full sentence for the admin that matches its sentinels.
type refusal struct {
	kinds []error
	msg   string
}

func (r *refusal) Error() string   { return r.msg }
func (r *refusal) Unwrap() []error { return r.kinds }

func refuse(kind error, format string, args ...any) error {
	return &refusal{kinds: []error{kind}, msg: fmt.Sprintf(format, args...)}
}

func invalid(kind error, format string, args ...any) error {
	return &refusal{kinds: []error{kind, ErrInvalid}, msg: fmt.Sprintf(format, args...)}
}

// DomainUUID checks a domain UUID and returns it in canonical form (36
// characters, lower case), as libvirt writes it. The nil UUID is refused:
// libvirt never gives it to a domain.
func DomainUUID(s string) (string, error) {
	u, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return "", invalid(ErrBadDomainUUID, "domain UUID %q is not a UUID (want 8-4-4-4-12 hex digits, e.g. 4dea22b3-1d52-d8f3-2516-782e98ab3fa0)", s)
	}
	if u == uuid.Nil {
		return "", invalid(ErrBadDomainUUID, "domain UUID %q is the nil UUID, which no domain has", s)
	}
	return u.String(), nil
}

// MaxDomainName is the longest domain name libvirt keeps, in bytes: it
// saves a domain's XML (defined or running) as NAME.xml, written first as
// NAME.xml.new (virFileRewrite), one directory entry of at most NAME_MAX,
// 255 bytes. libvirt 9.0 defines a domain of a 247-byte name and refuses
// one of 248 ("Failed to create file").
const MaxDomainName = 255 - len(".xml.new")

// DomainName checks a domain name. Names become parts of paths (libvirt's
// /etc/libvirt/qemu/NAME.xml, our logs and metrics), so one that could
// climb or split a path is refused: "/", NUL, "." and "..". So is a
// newline, which libvirt refuses too and which would forge log lines, and
// a name longer than libvirt keeps (MaxDomainName).
func DomainName(s string) error {
	switch {
	case s == "":
		return invalid(ErrBadDomainName, "the domain name is empty")
	case len(s) > MaxDomainName:
		return invalid(ErrBadDomainName, "domain name %q... is %d bytes long; libvirt's names are at most %d",
			strings.ToValidUTF8(s[:32], ""), len(s), MaxDomainName)
	case s == "." || s == "..":
		return invalid(ErrBadDomainName, "domain name %q is a path, not a name", s)
	case strings.ContainsAny(s, "/\x00\n"):
		return invalid(ErrBadDomainName, "domain name %q contains '/', NUL or a newline; libvirt names cannot", s)
	}
	return nil
}

// podLabel checks the label of a pod's claim: it goes into logs and
// messages, so one line of a bounded length.
func podLabel(s string) error {
	const max = 512
	switch {
	case s == "":
		return invalid(ErrBadDomainName, "the pod label is empty")
	case len(s) > max:
		return invalid(ErrBadDomainName, "pod label %q... is %d bytes long; at most %d", strings.ToValidUTF8(s[:32], ""), len(s), max)
	case strings.ContainsAny(s, "\x00\n"):
		return invalid(ErrBadDomainName, "pod label %q contains NUL or a newline", s)
	}
	return nil
}

// VGPUID checks a vGPU id: a PCI address or an mdev UUID. It returns the
// canonical form, as the ledger keys it.
func VGPUID(s string) (string, error) {
	if a, err := pci.ParseAddress(s); err == nil {
		return a.String(), nil
	}
	if u, err := uuid.Parse(s); err == nil && len(s) == 36 {
		return u.String(), nil
	}
	return "", invalid(ErrBadVGPU, "vGPU id %q is neither a PCI address (0000:03:00.1) nor an mdev UUID", s)
}

// check validates r and returns it with its UUID canonical.
func (r Request) check() (Request, error) {
	var err error
	if r.DomainUUID, err = DomainUUID(r.DomainUUID); err != nil {
		return r, err
	}
	if r.Pod != nil {
		if err := podLabel(r.DomainName); err != nil {
			return r, err
		}
	} else if err := DomainName(r.DomainName); err != nil {
		return r, err
	}
	if r.Count < 1 || r.Count > MaxCount {
		return r, invalid(ErrBadCount, "count %d is out of range; allowed: 1 to %d", r.Count, MaxCount)
	}
	if r.Profile == "" {
		return r, invalid(ErrUnknownProfile, "no profile given")
	}
	return r, nil
}

func (r Request) where() string {
	if r.NUMANode == nil {
		return "on this host"
	}
	return fmt.Sprintf("on NUMA node %d", *r.NUMANode)
}
