package inventory

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Old AMD GIM (the S7150's driver) takes its settings when it loads: the
// module parameters it was given, else /etc/gim_config, which it rewrites
// from them (docs/vendors/amd.md, "How old GIM behaves").
const (
	GIMModule     = sysfs.Modules + "/gim"
	GIMConfigPath = "/etc/gim_config"
	// gimUnset is how a uint parameter left at -1 reads.
	gimUnset = "4294967295"
)

// GIMState is what a loaded old GIM runs with.
type GIMState struct {
	VFNum           int `json:"vfNum"`           // 0: every VF
	SchedOption     int `json:"schedOption"`     // 0 round robin solid, 1 predictable performance, 2 round robin liquid
	SchedIntervalMS int `json:"schedIntervalMS"` // 0: GIM's default (6 ms)
}

// IsGIM reports whether old GIM drives a device with these ids: its
// gim_pci_tbl holds the S7150 alone.
func IsGIM(vendor, device uint16) bool { return vendor == VendorAMD && device == 0x6929 }

// ReadGIM returns the settings the loaded gim module runs with, nil when
// it is not loaded.
func ReadGIM(f sysfs.FS) (*GIMState, error) {
	if _, err := f.Stat(GIMModule); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("read gim's state: %w", err)
	}
	conf, err := f.ReadFile(GIMConfigPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read gim's state: %w", err)
	}
	file := parseGIMConfig(string(conf))
	var s GIMState
	for name, dst := range map[string]*int{"vf_num": &s.VFNum, "sched_option": &s.SchedOption, "sched_interval": &s.SchedIntervalMS} {
		v, err := sysfs.ReadString(f, GIMModule+"/parameters/"+name)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read gim's state: %w", err)
		}
		if n, perr := strconv.Atoi(v); err == nil && v != gimUnset && perr == nil {
			*dst = n
		} else {
			*dst = file[name]
		}
	}
	return &s, nil
}

// parseGIMConfig reads "key=value" (or "key value") pairs as GIM does,
// stopping at a key it does not know; values GIM would reject read as 0.
func parseGIMConfig(data string) map[string]int {
	bounds := map[string]int{"fb_option": 1, "sched_option": 2, "vf_num": 16, "pf_fb": 65536, "vf_fb": 65536,
		"sched_interval": 2000, "sched_interval_us": 999, "fb_clear": 1}
	out := map[string]int{}
	toks := strings.FieldsFunc(data, func(r rune) bool { return r == ' ' || r == '=' || r == '\n' || r == '\t' })
	for i := 0; i+1 < len(toks); i += 2 {
		limit, ok := bounds[toks[i]]
		if !ok {
			break
		}
		if v, err := strconv.Atoi(toks[i+1]); err == nil && v >= 0 && v <= limit {
			out[toks[i]] = v
		}
	}
	return out
}

// IsNewGIM reports whether new GIM (amd/MxGPU-Virtualization) drives a PF
// with these ids: the MI300X family of its libgv device table
// (amdgv_device.c: 74a1, 74a2, 74a5, 74a8, 74a9), the MI350X (75a0), the
// MI355X (75a3) and the Radeon PRO V710 (7460) that its release notes add
// (ids: ROCm/gpu-operator's NFD rule). It enables SR-IOV itself, one VF
// count per GPU, changed with amd-smi (docs/vendors/amd.md, "New GIM").
func IsNewGIM(vendor, device uint16) bool {
	switch device {
	case 0x74a1, 0x74a2, 0x74a5, 0x74a8, 0x74a9, 0x75a0, 0x75a3, 0x7460:
		return vendor == VendorAMD
	}
	return false
}
