package xe

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Driver is the xe driver's name.
const Driver = "xe"

// VFIODriver is xe's VFIO variant driver (drivers/vfio/pci/xe, Linux
// 6.19+): VFIO migration (stop-copy) for xe VFs; it binds only through
// driver_override.
const VFIODriver = "xe-vfio-pci"

// Attributes of a profile.
const (
	ExecQuantum    = "exec_quantum_ms"
	PreemptTimeout = "preempt_timeout_us"
	Priority       = "sched_priority"
	// VRAMQuota is a VF's provisioned VRAM in bytes (Linux 7.0+). xe
	// rounds a write up to QuotaAlign; a non-zero quota written before
	// the VFs are enabled keeps xe from auto-provisioning their VRAM.
	VRAMQuota = "vram_quota"
)

// QuotaAlign is the granule of VRAM provisioning (xe_gt_sriov_pf_config.c
// pf_get_lmem_alignment).
const QuotaAlign = 2 << 20

// ErrNoAdmin: the PF has no sriov_admin/ (a kernel before 6.19, or xe not
// in PF mode).
var ErrNoAdmin = errors.New("no sriov_admin/ directory")

// Sched is one function's scheduling profile.
type Sched struct {
	ExecQuantumMS    uint32 `json:"execQuantumMS"`
	PreemptTimeoutUS uint32 `json:"preemptTimeoutUS"`
	Priority         string `json:"priority"`
}

// AdminDir is pf's sriov_admin/ directory.
func AdminDir(pf pci.Address) string { return pci.DevicePath(pf) + "/sriov_admin" }

// VFFile is VF n's (1-based, as xe names them) profile attribute.
func VFFile(pf pci.Address, n int, attr string) string {
	return fmt.Sprintf("%s/vf%d/profile/%s", AdminDir(pf), n, attr)
}

// PFFile is the PF's own profile attribute.
func PFFile(pf pci.Address, attr string) string { return AdminDir(pf) + "/pf/profile/" + attr }

// BulkFile is the attribute that sets every function at once.
func BulkFile(pf pci.Address, attr string) string { return AdminDir(pf) + "/.bulk_profile/" + attr }

// HasAdmin reports whether pf has sriov_admin/.
func HasAdmin(f sysfs.FS, pf pci.Address) (bool, error) { return sysfs.Exists(f, AdminDir(pf)) }

// HasQuota reports whether pf's VFs have vram_quota (Linux 7.0+, a GPU
// with VRAM).
func HasQuota(f sysfs.FS, pf pci.Address) (bool, error) {
	return sysfs.Exists(f, VFFile(pf, 1, VRAMQuota))
}

// VFIOLoaded reports whether xe-vfio-pci is loaded.
func VFIOLoaded(f sysfs.FS) (bool, error) {
	return sysfs.Exists(f, sysfs.PCIDrivers+"/"+VFIODriver)
}

// ReadQuota reads VF n's (from 1) vram_quota.
func ReadQuota(f sysfs.FS, pf pci.Address, n int) (uint64, error) {
	q, err := sysfs.ReadUint(f, VFFile(pf, n, VRAMQuota), 64)
	return q, noAdmin(f, err, pf)
}

// ReadVF reads VF n's profile (n from 1).
func ReadVF(f sysfs.FS, pf pci.Address, n int) (Sched, error) {
	var s Sched
	eq, err := sysfs.ReadUint(f, VFFile(pf, n, ExecQuantum), 32)
	if err != nil {
		return s, noAdmin(f, err, pf)
	}
	pt, err := sysfs.ReadUint(f, VFFile(pf, n, PreemptTimeout), 32)
	if err != nil {
		return s, noAdmin(f, err, pf)
	}
	prio, err := Read(f, pf, VFFile(pf, n, Priority))
	if err != nil {
		return s, err
	}
	return Sched{ExecQuantumMS: uint32(eq), PreemptTimeoutUS: uint32(pt), Priority: prio}, nil
}

// ParsePriority finds the current choice in "[low] normal high".
func ParsePriority(s string) (string, error) {
	for _, w := range strings.Fields(s) {
		if len(w) > 2 && w[0] == '[' && w[len(w)-1] == ']' {
			return w[1 : len(w)-1], nil
		}
	}
	return "", fmt.Errorf("%q marks no current priority in brackets", strings.TrimSpace(s))
}

// Write writes value to p, one of VFFile, PFFile or BulkFile (a VF's
// priority changes only through the bulk file, for every function).
func Write(f sysfs.FS, pf pci.Address, p, value string) error {
	return noAdmin(f, sysfs.WriteString(f, p, value), pf)
}

// Read reads p, one of VFFile or PFFile; a priority as its current choice.
func Read(f sysfs.FS, pf pci.Address, p string) (string, error) {
	s, err := sysfs.ReadString(f, p)
	if err != nil {
		return "", noAdmin(f, err, pf)
	}
	if !strings.HasSuffix(p, "/"+Priority) {
		return s, nil // ReadString trimmed it
	}
	prio, err := ParsePriority(s)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	return prio, nil
}

// noAdmin turns a missing sriov_admin/ into ErrNoAdmin.
func noAdmin(f sysfs.FS, err error, pf pci.Address) error {
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if ok, _ := HasAdmin(f, pf); !ok {
		return fmt.Errorf("%w at %s: %w", ErrNoAdmin, AdminDir(pf), err)
	}
	return err
}
