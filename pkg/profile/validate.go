package profile

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/vgpu-project/vgpu/internal/strictyaml"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// What messages offer for the fields with a syntax of their own.
const (
	nameRule     = "lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters, e.g. t4-4q"
	mdevIDRule   = "a directory name under mdev_supported_types, e.g. nvidia-232"
	nvidiaIDRule = "a positive id from nvidia/creatable_vgpu_types, e.g. 1153"
	pciIDRule    = "4 hex digits other than 0000 and ffff, e.g. 10de"
)

// Validate checks a File's values: what Decode checks after the shape, for
// Files built in code. A decoded File always validates.
func (f *File) Validate() error {
	return errors.Join(f.check(nil)...)
}

// check reports every bad value, skipping fields in broken (already
// reported by the decoder) and everything under them.
func (f *File) check(broken map[string]bool) []error {
	var errs []error
	bad := func(field, problem, allowed string) {
		if skipped(broken, field) {
			return
		}
		errs = append(errs, &FieldError{File: f.Path, Line: f.line(field), Field: field, Problem: problem, Allowed: allowed, Kind: ErrInvalid})
	}
	textField := func(field, s, allowed string) {
		switch {
		case s == "":
			bad(field, "missing", allowed)
		case !oneLine(s):
			bad(field, fmt.Sprintf("%q is not one line of text", s), allowed)
		}
	}

	switch f.Version {
	case Version:
	case "":
		bad("version", "missing", Version)
	default:
		bad("version", fmt.Sprintf("%s is not supported", strictyaml.Quote(f.Version)), Version)
	}
	textField("model", f.Model.Name, "the GPU model's name, e.g. NVIDIA Tesla T4")
	if f.Model.Source != "" && !oneLine(f.Model.Source) {
		bad("source", fmt.Sprintf("%q is not one line of text", f.Model.Source), sourceRule)
	}

	m := f.Model
	switch {
	case m.MdevParent != "":
		if !vgpu.ValidParentName(m.MdevParent) {
			bad("match.mdev-parent", fmt.Sprintf("%s is not an mdev parent name", strictyaml.Quote(m.MdevParent)), vgpu.ParentRule)
		}
		if m.VendorID != 0 || len(m.DeviceIDs) != 0 {
			bad("match.mdev-parent", "cannot be given with vendor and devices", "either vendor and devices or mdev-parent")
		}
		if slices.Contains(knownDialects(), m.Dialect) && m.Dialect != inventory.DialectMdev {
			bad("dialect", fmt.Sprintf("%s is not possible on a virtual mdev parent", m.Dialect), "mdev")
		}
	case m.VendorID == 0 || m.VendorID == 0xffff:
		bad("match.vendor", fmt.Sprintf("%04x is not a PCI vendor id", m.VendorID), pciIDRule)
	}
	if len(m.DeviceIDs) == 0 && m.MdevParent == "" {
		bad("match.devices", "the list is empty", "one or more device ids, e.g. [1eb8]")
	}
	for i, id := range m.DeviceIDs {
		field := fmt.Sprintf("match.devices[%d]", i)
		switch {
		case id == 0 || id == 0xffff:
			bad(field, fmt.Sprintf("%04x is not a PCI device id", id), pciIDRule)
		case slices.Index(m.DeviceIDs, id) < i:
			bad(field, fmt.Sprintf("%04x is listed twice", id), "each device id once")
		}
	}
	if !slices.Contains(knownDialects(), m.Dialect) {
		if m.Dialect == "" {
			bad("dialect", "missing", dialectList())
		} else {
			bad("dialect", fmt.Sprintf("%s is not a dialect", strictyaml.Quote(string(m.Dialect))), dialectList())
		}
	}

	if len(f.Profiles) == 0 {
		bad("profiles", "the list is empty", "one or more profiles")
	}
	splits := allowedSplits(m.Dialect)
	firstName := map[string]int{}
	type splitKey struct {
		split, sched, interval int
		xe                     XeOptions
	}
	firstSplit := map[splitKey]int{}
	// Two profiles may share a type when their vgpu_params differ.
	firstMdev := map[string]int{}
	firstNVIDIA := map[string]int{}
	for i, s := range f.Profiles {
		p := fmt.Sprintf("profiles[%d]", i)
		switch {
		case s.Name == "":
			bad(p+".name", "missing", nameRule)
		case !validName(s.Name):
			bad(p+".name", fmt.Sprintf("%s is not a valid profile name", strictyaml.Quote(s.Name)), nameRule)
		case s.Name == Passthrough:
			bad(p+".name", fmt.Sprintf("%s is the built-in profile that passes any GPU through", Passthrough), "another name, e.g. "+Passthrough+"-full")
		default:
			if j, dup := firstName[s.Name]; dup {
				bad(p+".name", fmt.Sprintf("%s is already the name of profiles[%d]", s.Name, j), "a name unique across the catalog")
			} else {
				firstName[s.Name] = i
			}
		}

		if !slices.Contains(splits, s.Split) {
			bad(p+".split", fmt.Sprintf("%d is not allowed", s.Split), joinInts(splits))
		} else if !usesMdev(m.Dialect) && !usesNVIDIA(m.Dialect) {
			// Without a type (or a GIM scheduler) to tell them apart, two
			// profiles of one split would be two names for the same thing.
			key := splitKey{s.Split, s.GIM.SchedOption(), s.GIM.Interval(), XeOptions{}}
			if s.Xe != nil {
				key.xe = *s.Xe
				key.xe.Priority = s.Xe.XePriority()
			}
			if j, dup := firstSplit[key]; dup {
				bad(p+".split", fmt.Sprintf("%d is already the split of profiles[%d]", s.Split, j), "one profile per split (and scheduler) for dialect "+string(m.Dialect))
			} else {
				firstSplit[key] = i
			}
		}
		if g := s.GIM; g != nil {
			switch {
			case m.Dialect != inventory.DialectSRIOV:
				bad(p+".gim", "is not used by dialect "+string(m.Dialect), "only with dialect sriov (old AMD GIM)")
			case !slices.Contains(GIMSchedulers(), g.Scheduler):
				bad(p+".gim.scheduler", fmt.Sprintf("%s is not a GIM scheduler", strictyaml.Quote(g.Scheduler)), gimSchedRule())
			case g.IntervalMS < 0 || g.IntervalMS > GIMMaxIntervalMS:
				bad(p+".gim.interval-ms", fmt.Sprintf("%d is out of range", g.IntervalMS), gimIntervalRule)
			}
		}

		if x := s.Xe; x != nil {
			switch {
			case m.Dialect != inventory.DialectSRIOV:
				bad(p+".xe", "is not used by dialect "+string(m.Dialect), "only with dialect sriov (Intel xe)")
			case x.Priority != "" && !slices.Contains(XePriorities(), x.Priority):
				bad(p+".xe.sched-priority", fmt.Sprintf("%s is not a VF scheduling priority", strictyaml.Quote(x.Priority)), xePriorityRule())
			}
			mb, pinned, err := ParseXeVRAMQuota(x.VRAMQuota)
			switch {
			case err != nil:
				bad(p+".xe.vram-quota", err.Error(), xeQuotaRule)
			case pinned && m.FramebufferMB <= XePFReserveMB:
				bad(p+".xe.vram-quota", fmt.Sprintf("pinned needs framebuffer-mb above the %d MiB the PF keeps", XePFReserveMB), "framebuffer-mb on the model")
			case mb%2 != 0:
				bad(p+".xe.vram-quota", fmt.Sprintf("%d MiB is not a multiple of xe's 2 MiB granule", mb), xeQuotaRule)
			case mb*uint64(max(s.Split, 1)) > m.FramebufferMB:
				bad(p+".xe.vram-quota", fmt.Sprintf("%d VFs of %d MiB exceed the model's %d MiB", s.Split, mb, m.FramebufferMB), xeQuotaRule)
			}
			if s.GIM != nil {
				bad(p+".xe", "is given with gim", "one vendor's scheduler: gim (old AMD GIM) or xe (Intel)")
			}
		}

		if g := s.GPUInstance; g != nil {
			switch {
			case m.Dialect != inventory.DialectNVIDIAVF || m.VendorID != NVIDIAVendor:
				bad(p+".gpu-instance", "is not used by this model", "only on NVIDIA (10de) GPUs of dialect nvidia-vf (MIG-backed vGPU)")
			case !giProfileName.MatchString(g.Profile):
				bad(p+".gpu-instance.profile", fmt.Sprintf("%s is not a GPU instance profile", strictyaml.Quote(g.Profile)), giProfileRule)
			case g.ID < 0:
				bad(p+".gpu-instance.id", fmt.Sprintf("%d is not a profile id", g.ID), giIDRule)
			case m.FramebufferMB > 0 && g.StatedMB > m.FramebufferMB:
				bad(p+".gpu-instance.memory-mb", fmt.Sprintf("%d MiB exceeds the model's %d MiB", g.StatedMB, m.FramebufferMB), giMemoryRule)
			}
		}

		if x := s.Scheduler; x != nil {
			switch {
			case !(Profile{Model: m}).TakesVGPUParams():
				bad(p+".nvidia-scheduler", "is NVIDIA's: not used by this model", "only on NVIDIA (10de) GPUs of dialect mdev, sriov-mdev or nvidia-vf")
			case s.GPUInstance != nil:
				bad(p+".nvidia-scheduler", "is given with gpu-instance", "time-sliced profiles only: NVML has no vGPU scheduler with MIG on")
			case !slices.Contains(NVSchedulerPolicies(), x.Policy):
				bad(p+".nvidia-scheduler.policy", fmt.Sprintf("%s is not a vGPU scheduler policy", strictyaml.Quote(x.Policy)), nvPolicyRule())
			case x.TimesliceMS < 0 || x.TimesliceMS > NVSchedulerMaxTimesliceMS:
				bad(p+".nvidia-scheduler.timeslice-ms", fmt.Sprintf("%d is out of range", x.TimesliceMS), nvTimesliceRule)
			case x.Policy == "best-effort" && (x.TimesliceMS > 0 || x.Adaptive):
				bad(p+".nvidia-scheduler", "best-effort takes no time slice or adaptive round robin", "timeslice-ms or adaptive with equal-share or fixed-share")
			case x.TimesliceMS > 0 && x.Adaptive:
				bad(p+".nvidia-scheduler", "sets both timeslice-ms and adaptive", "one: a strict round robin's slice, or adaptive")
			}
		}

		if s.MixedSize {
			switch {
			case m.Dialect != inventory.DialectNVIDIAVF || m.VendorID != NVIDIAVendor:
				bad(p+".nvidia-mixed-size", "is NVIDIA's vGPU 17+ mode: not used by this model", "only on NVIDIA (10de) GPUs of dialect nvidia-vf")
			case s.GPUInstance != nil:
				bad(p+".nvidia-mixed-size", "is given with gpu-instance", "time-sliced profiles only: NVML has no mixed-size mode with MIG on")
			case s.Scheduler != nil && s.Scheduler.Policy == "fixed-share":
				bad(p+".nvidia-mixed-size", "is given with the fixed-share scheduler", "best-effort or equal-share: NVIDIA supports no fixed share in mixed-size mode")
			}
		}

		if len(s.Params) > 0 {
			if !(Profile{Model: m}).TakesVGPUParams() {
				bad(p+".vgpu-params", "is NVIDIA's: not used by this model", "only on NVIDIA (10de) GPUs of dialect mdev, sriov-mdev or nvidia-vf")
			}
			seen := map[string]bool{}
			for _, x := range s.Params {
				switch {
				case !slices.Contains(NVIDIAParams(), x.Name):
					bad(p+".vgpu-params", fmt.Sprintf("%s is not a vGPU plugin parameter", strictyaml.Quote(x.Name)), strings.Join(NVIDIAParams(), ", "))
				case seen[x.Name]:
					bad(p+".vgpu-params."+x.Name, "is given twice", "each parameter once")
				case x.Value != 0 && x.Value != 1:
					bad(p+".vgpu-params."+x.Name, fmt.Sprintf("%d is not allowed", x.Value), paramRule)
				}
				seen[x.Name] = true
			}
		}

		if s.Description != "" && !oneLine(s.Description) {
			bad(p+".description", fmt.Sprintf("%q is not one line of text", s.Description), "one line of text")
		}

		if !slices.Contains(knownDialects(), m.Dialect) {
			continue // which selector a profile needs depends on the dialect
		}
		switch {
		case usesMdev(m.Dialect) && s.Mdev == MdevType{}:
			bad(p+".mdev-type", "missing", "the mdev type's name and, where known, id, e.g. {id: nvidia-232, name: GRID T4-4Q}")
		case usesMdev(m.Dialect):
			if s.Mdev.ID != "" && !validTypeID(s.Mdev.ID) {
				bad(p+".mdev-type.id", fmt.Sprintf("%s is not an mdev type id", strictyaml.Quote(s.Mdev.ID)), mdevIDRule+", or none to find the type by name")
			} else if j, dup := firstMdev["id "+s.Mdev.ID+"|"+s.variant()]; s.Mdev.ID != "" && dup {
				bad(p+".mdev-type.id", fmt.Sprintf("%s is already the type of profiles[%d]", s.Mdev.ID, j), "each mdev type once (per vgpu-params and nvidia-scheduler)")
			} else if s.Mdev.ID != "" {
				firstMdev["id "+s.Mdev.ID+"|"+s.variant()] = i
			}
			textField(p+".mdev-type.name", s.Mdev.Name, "the type's name attribute, e.g. GRID T4-4Q")
			typeOnce(firstMdev, p+".mdev-type.name", s.Mdev.Name, s.variant(), i, bad)
		case s.Mdev != MdevType{}:
			bad(p+".mdev-type", "is not used by dialect "+string(m.Dialect), "only with dialect mdev or sriov-mdev")
		}

		switch {
		case usesNVIDIA(m.Dialect) && s.NVIDIA == NVIDIAType{}:
			bad(p+".nvidia-type", "missing", "the vGPU type's name and, where known, id, e.g. {id: 1153, name: NVIDIA L40S-12Q}")
		case usesNVIDIA(m.Dialect):
			key := fmt.Sprint("id ", s.NVIDIA.ID, "|", s.variant())
			if s.NVIDIA.ID < 0 {
				bad(p+".nvidia-type.id", fmt.Sprintf("%d is not a vGPU type id", s.NVIDIA.ID), nvidiaIDRule+", or none to find the type by name")
			} else if j, dup := firstNVIDIA[key]; s.NVIDIA.ID != 0 && dup {
				bad(p+".nvidia-type.id", fmt.Sprintf("%d is already the type of profiles[%d]", s.NVIDIA.ID, j), "each vGPU type once (per vgpu-params and nvidia-scheduler)")
			} else if s.NVIDIA.ID != 0 {
				firstNVIDIA[key] = i
			}
			textField(p+".nvidia-type.name", s.NVIDIA.Name, "the type's name, e.g. NVIDIA L40S-12Q")
			typeOnce(firstNVIDIA, p+".nvidia-type.name", s.NVIDIA.Name, s.variant(), i, bad)
		case s.NVIDIA != NVIDIAType{}:
			bad(p+".nvidia-type", "is not used by dialect "+string(m.Dialect), "only with dialect nvidia-vf")
		}
	}
	return errs
}

// typeOnce reports a type name a file already used (with the same
// vgpu-params): a type found by name alone must not be two profiles.
func typeOnce(first map[string]int, field, name, params string, i int, bad func(field, problem, allowed string)) {
	if name == "" {
		return
	}
	key := "name " + typeKey(name) + "|" + params
	if j, dup := first[key]; dup {
		bad(field, fmt.Sprintf("%s is already the type of profiles[%d]", name, j), "each type once (per vgpu-params)")
		return
	}
	first[key] = i
}

// line finds the line of field, or of the nearest enclosing field.
func (f *File) line(field string) int {
	for p := field; p != ""; p = parent(p) {
		if l, ok := f.lines[p]; ok {
			return l
		}
	}
	return 0
}

// skipped reports whether field or an enclosing field is in broken.
func skipped(broken map[string]bool, field string) bool {
	for p := field; p != ""; p = parent(p) {
		if broken[p] {
			return true
		}
	}
	return false
}

// parent of "profiles[2].mdev-type.id" is "profiles[2].mdev-type", then
// "profiles[2]", then "profiles", then "".
func parent(field string) string {
	if i := strings.LastIndexAny(field, ".["); i >= 0 {
		return field[:i]
	}
	return ""
}

// validName: profile names go into domain XML, ledger keys and file names.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}

// validTypeID: an mdev type id is a sysfs directory name.
func validTypeID(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 255 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("-_.:+", r) {
			return false
		}
	}
	return true
}

// oneLine: names and descriptions are shown in tables and one-line errors,
// and compared with sysfs attributes that the kernel ends with a newline.
func oneLine(s string) bool {
	if strings.TrimSpace(s) != s {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			return false
		}
	}
	return true
}

// giProfileName is how nvidia-smi names GPU instance profiles: "1g.5gb",
// "1g.10gb+me".
var giProfileName = regexp.MustCompile(`^[1-8]g\.[0-9]+gb(\+me)?$`)
