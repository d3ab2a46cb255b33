package profile

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-project/vgpu/internal/strictyaml"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// Keys of each mapping, in the order messages list them.
func fileKeys() []string {
	return []string{"version", "model", "match", "dialect", "framebuffer-mb", "migration", "source", "profiles"}
}
func migrationKeys() []string { return []string{"stop-copy", "pause", "dirty-tracking"} }
func matchKeys() []string     { return []string{"vendor", "devices", "mdev-parent"} }
func specKeys() []string {
	return []string{"name", "split", "mdev-type", "nvidia-type", "gpu-instance", "gim", "xe", "nvidia-scheduler", "nvidia-mixed-size", "vgpu-params", "description"}
}
func gimKeys() []string { return []string{"scheduler", "interval-ms"} }
func xeKeys() []string {
	return []string{"exec-quantum-ms", "preempt-timeout-us", "sched-priority", "vram-quota"}
}
func nvSchedKeys() []string {
	return []string{"policy", "timeslice-ms", "adaptive"}
}
func typeKeys() []string { return []string{"id", "name"} }
func giKeys() []string   { return []string{"profile", "id", "memory-mb"} }

// Decode reads one catalog file strictly: every unknown field, missing
// field, wrong type and bad value is reported (all of them, joined) with
// the file, the line, the field's path and what is allowed. file only names
// the data in messages.
func Decode(file string, data []byte) (*File, error) {
	d := &decoder{strictyaml.New(file, ErrInvalid)}
	f := d.decode(data)
	if f == nil {
		return nil, d.Err()
	}
	f.Path, f.lines = file, d.Lines
	d.Errs = append(d.Errs, f.check(d.Broken)...)
	if err := d.Err(); err != nil {
		return nil, err
	}
	return f, nil
}

// decoder walks a catalog file's YAML nodes (internal/strictyaml).
type decoder struct{ *strictyaml.Walker }

func (d *decoder) decode(data []byte) *File {
	root := d.Document(data, "a mapping starting with version: "+Version)
	if root == nil {
		return nil
	}
	f := &File{}
	m := d.Mapping(root, "", fileKeys())
	if m == nil {
		return nil
	}
	if n := d.Require(root, m, "", "version", Version); n != nil {
		f.Version, _ = d.Scalar(n, "version", Version)
	}
	if n := d.Require(root, m, "", "model", "the GPU model's name, e.g. NVIDIA Tesla T4"); n != nil {
		f.Model.Name, _ = d.Scalar(n, "model", "the GPU model's name")
	}
	if n := d.Require(root, m, "", "match", "a mapping of "+strings.Join(matchKeys(), ", ")); n != nil {
		d.match(n, &f.Model)
	}
	if n := d.Require(root, m, "", "dialect", dialectList()); n != nil {
		s, _ := d.Scalar(n, "dialect", dialectList())
		f.Model.Dialect = inventory.Dialect(s)
	}
	if n := m["framebuffer-mb"]; n != nil {
		const allowed = "the GPU's memory in MiB, e.g. 16384; leave it out when the GPU has none of its own"
		if v, ok := d.Int(n, "framebuffer-mb", allowed); ok {
			if v <= 0 {
				d.Fail(n.Line, "framebuffer-mb", fmt.Sprintf("%d is not a size", v), allowed)
			} else {
				f.Model.FramebufferMB = uint64(v)
			}
		}
	}
	if n := m["source"]; n != nil {
		f.Model.Source, _ = d.Scalar(n, "source", sourceRule)
	}
	if n := m["migration"]; n != nil {
		f.Model.Migration = d.migration(n)
	}
	if n := d.Require(root, m, "", "profiles", "a list of one or more profiles"); n != nil {
		for i, item := range d.List(n, "profiles", "a list of one or more profiles") {
			f.Profiles = append(f.Profiles, d.spec(item, fmt.Sprintf("profiles[%d]", i), f.Model.Dialect))
		}
	}
	return f
}

// hexID reads a PCI id. It uses the text as written, never the YAML type:
// an unquoted 1002 is an int to YAML and 1e30 a float, but both are hex here.
func (d *decoder) hexID(n *yaml.Node, path string) (uint16, bool) {
	const allowed = "4 hex digits, e.g. 10de"
	s, ok := d.Scalar(n, path, allowed)
	if !ok {
		return 0, false
	}
	h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	v, err := strconv.ParseUint(h, 16, 16)
	if len(h) != 4 || err != nil {
		d.Fail(n.Line, path, fmt.Sprintf("%s is not a PCI id", strictyaml.Quote(s)), allowed)
		return 0, false
	}
	return uint16(v), true
}

func (d *decoder) match(n *yaml.Node, m *Model) {
	fields := d.Mapping(n, "match", matchKeys())
	if fields == nil {
		return
	}
	if v := fields["mdev-parent"]; v != nil {
		s, ok := d.Scalar(v, "match.mdev-parent", vgpu.ParentRule)
		if ok && s == "" {
			d.Fail(v.Line, "match.mdev-parent", fmt.Sprintf("%s is not an mdev parent name", strictyaml.Quote(s)), vgpu.ParentRule)
		}
		if s == "" {
			// Given, so the model has no PCI ids to report missing.
			d.Broken["match"] = true
		}
		m.MdevParent = s
		for _, k := range []string{"vendor", "devices"} {
			if o := fields[k]; o != nil {
				d.Fail(o.Line, "match."+k, "cannot be given with mdev-parent", "either vendor and devices (a PCI GPU) or mdev-parent (a virtual mdev parent)")
			}
		}
		return
	}
	if v := d.Require(n, fields, "match", "vendor", "4 hex digits, e.g. 10de"); v != nil {
		m.VendorID, _ = d.hexID(v, "match.vendor")
	}
	const devAllowed = "a list of 4-hex-digit device ids, e.g. [1eb8]"
	if v := d.Require(n, fields, "match", "devices", devAllowed); v != nil {
		items := d.List(v, "match.devices", devAllowed)
		if items == nil && !d.Broken["match.devices"] {
			m.DeviceIDs = []uint16{} // present but empty: check says so
		}
		for i, item := range items {
			if id, ok := d.hexID(item, fmt.Sprintf("match.devices[%d]", i)); ok {
				m.DeviceIDs = append(m.DeviceIDs, id)
			} else {
				m.DeviceIDs = append(m.DeviceIDs, 0)
			}
		}
	}
}

// migration reads the model's migration mapping.
func (d *decoder) migration(n *yaml.Node) *Migration {
	fields := d.Mapping(n, "migration", migrationKeys())
	if fields == nil {
		return nil
	}
	mig := &Migration{DirtyTracking: "none"}
	if v := fields["stop-copy"]; v != nil {
		const allowed = "framebuffer (the vGPU's whole framebuffer moves with the guest stopped) or MiB, e.g. 0"
		if s, ok := d.Scalar(v, "migration.stop-copy", allowed); ok {
			if s == "framebuffer" {
				mig.StopCopyFramebuffer = true
			} else if mb, err := strconv.ParseUint(s, 10, 32); err == nil {
				mig.StopCopyMB = mb
			} else {
				d.Fail(v.Line, "migration.stop-copy", strictyaml.Quote(s)+" is neither framebuffer nor a number of MiB", allowed)
			}
		}
	}
	if v := fields["pause"]; v != nil {
		const allowed = "true or false: whether the driver can migrate a paused guest"
		if pause, ok := d.boolean(v, "migration.pause", allowed); ok {
			mig.NoPause = !pause
		}
	}
	if v := fields["dirty-tracking"]; v != nil {
		const allowed = "device, iommu or none"
		if s, ok := d.Scalar(v, "migration.dirty-tracking", allowed); ok {
			if s != "device" && s != "iommu" && s != "none" {
				d.Fail(v.Line, "migration.dirty-tracking", strictyaml.Quote(s)+" is not a tracking mode", allowed)
			}
			mig.DirtyTracking = s
		}
	}
	return mig
}

// boolean reads n, true or false, at path; allowed says what the field
// takes.
func (d *decoder) boolean(n *yaml.Node, path, allowed string) (v, ok bool) {
	s, ok := d.Scalar(n, path, allowed)
	if !ok {
		return false, false
	}
	switch s {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	d.Fail(n.Line, path, strictyaml.Quote(s)+" is not a boolean", allowed)
	return false, false
}

// int32 reads n, an integer, at path, clamped to an int32 so that a huge
// number still reads as itself in the message of the field's check.
func (d *decoder) int32(n *yaml.Node, path, rule string) (int, bool) {
	i, ok := d.Int(n, path, rule)
	return int(max(min(i, 1<<31-1), -1<<31)), ok
}

func (d *decoder) spec(n *yaml.Node, path string, dialect inventory.Dialect) Spec {
	var s Spec
	m := d.Mapping(n, path, specKeys())
	if m == nil {
		return s
	}
	if v := d.Require(n, m, path, "name", nameRule); v != nil {
		s.Name, _ = d.Scalar(v, path+".name", nameRule)
	}
	splits := joinInts(allowedSplits(dialect))
	if v := d.Require(n, m, path, "split", splits); v != nil {
		if i, ok := d.int32(v, path+".split", splits); ok {
			s.Split = i
		}
	}
	if v := m["description"]; v != nil {
		s.Description, _ = d.Scalar(v, path+".description", "one line of text")
	}
	if v := m["mdev-type"]; v != nil {
		p := path + ".mdev-type"
		if t := d.Mapping(v, p, typeKeys()); t != nil {
			if x := t["id"]; x != nil { // without it the type is found by name
				if id, ok := d.Scalar(x, p+".id", mdevIDRule); ok && id == "" {
					d.Fail(x.Line, p+".id", "is empty", mdevIDRule+", or leave id out to find the type by name")
				} else {
					s.Mdev.ID = id
				}
			}
			if x := d.Require(v, t, p, "name", "the type's name attribute, e.g. GRID T4-4Q"); x != nil {
				s.Mdev.Name, _ = d.Scalar(x, p+".name", "the type's name attribute")
			}
		}
	}
	if v := m["nvidia-type"]; v != nil {
		p := path + ".nvidia-type"
		if t := d.Mapping(v, p, typeKeys()); t != nil {
			if x := t["id"]; x != nil { // without it the type is found by name
				if id, ok := d.Int(x, p+".id", nvidiaIDRule); ok && id <= 0 {
					d.Fail(x.Line, p+".id", fmt.Sprintf("%d is not a vGPU type id", id), nvidiaIDRule+", or leave id out to find the type by name")
				} else if ok {
					s.NVIDIA.ID = int(min(id, 1<<31-1))
				}
			}
			if x := d.Require(v, t, p, "name", "the type's name, e.g. NVIDIA L40S-12Q"); x != nil {
				s.NVIDIA.Name, _ = d.Scalar(x, p+".name", "the type's name")
			}
		}
	}
	if v := m["gpu-instance"]; v != nil {
		p := path + ".gpu-instance"
		s.GPUInstance = &GPUInstance{ID: -1}
		if t := d.Mapping(v, p, giKeys()); t != nil {
			if x := d.Require(v, t, p, "profile", giProfileRule); x != nil {
				s.GPUInstance.Profile, _ = d.Scalar(x, p+".profile", giProfileRule)
			}
			if x := d.Require(v, t, p, "id", giIDRule); x != nil {
				if id, ok := d.int32(x, p+".id", giIDRule); ok {
					s.GPUInstance.ID = id
				}
			}
			if x := t["memory-mb"]; x != nil {
				if mb, ok := d.Int(x, p+".memory-mb", giMemoryRule); ok {
					if mb <= 0 {
						d.Fail(x.Line, p+".memory-mb", fmt.Sprintf("%d is not a size", mb), giMemoryRule)
					} else {
						s.GPUInstance.StatedMB = uint64(mb)
					}
				}
			}
		}
	}
	if v := m["gim"]; v != nil {
		p := path + ".gim"
		s.GIM = &GIMOptions{}
		if t := d.Mapping(v, p, gimKeys()); t != nil {
			if x := d.Require(v, t, p, "scheduler", gimSchedRule()); x != nil {
				s.GIM.Scheduler, _ = d.Scalar(x, p+".scheduler", gimSchedRule())
			}
			if x := t["interval-ms"]; x != nil {
				if ms, ok := d.int32(x, p+".interval-ms", gimIntervalRule); ok {
					s.GIM.IntervalMS = ms
				}
			}
		}
	}
	if v := m["xe"]; v != nil {
		p := path + ".xe"
		s.Xe = &XeOptions{}
		if t := d.Mapping(v, p, xeKeys()); t != nil {
			u32 := func(key string, into *uint32) {
				if x := t[key]; x != nil {
					if i, ok := d.Int(x, p+"."+key, xeU32Rule); ok {
						if i < 0 || i > 1<<32-1 {
							d.Fail(x.Line, p+"."+key, fmt.Sprintf("%d is out of range", i), xeU32Rule)
							return
						}
						*into = uint32(i)
					}
				}
			}
			u32("exec-quantum-ms", &s.Xe.ExecQuantumMS)
			u32("preempt-timeout-us", &s.Xe.PreemptTimeoutUS)
			if x := t["sched-priority"]; x != nil {
				s.Xe.Priority, _ = d.Scalar(x, p+".sched-priority", xePriorityRule())
			}
			if x := t["vram-quota"]; x != nil {
				s.Xe.VRAMQuota, _ = d.Scalar(x, p+".vram-quota", xeQuotaRule)
			}
		}
	}
	if v := m["nvidia-scheduler"]; v != nil {
		p := path + ".nvidia-scheduler"
		s.Scheduler = &NVScheduler{}
		if t := d.Mapping(v, p, nvSchedKeys()); t != nil {
			if x := d.Require(v, t, p, "policy", nvPolicyRule()); x != nil {
				s.Scheduler.Policy, _ = d.Scalar(x, p+".policy", nvPolicyRule())
			}
			if x := t["timeslice-ms"]; x != nil {
				if ms, ok := d.int32(x, p+".timeslice-ms", nvTimesliceRule); ok {
					s.Scheduler.TimesliceMS = ms
				}
			}
			if x := t["adaptive"]; x != nil {
				s.Scheduler.Adaptive, _ = d.boolean(x, p+".adaptive", "true or false")
			}
		}
	}
	if v := m["nvidia-mixed-size"]; v != nil {
		p := path + ".nvidia-mixed-size"
		s.MixedSize, _ = d.boolean(v, p, "true or false")
	}
	if v := m["vgpu-params"]; v != nil {
		p := path + ".vgpu-params"
		if t := d.Mapping(v, p, NVIDIAParams()); t != nil {
			for _, name := range NVIDIAParams() {
				x := t[name]
				if x == nil {
					continue
				}
				if i, ok := d.int32(x, p+"."+name, paramRule); ok {
					s.Params = append(s.Params, VGPUParam{Name: name, Value: i})
				}
			}
		}
	}
	return s
}

const paramRule = "0 or 1"

const (
	giProfileRule = "a GPU instance profile as nvidia-smi mig -lgip names it, e.g. 1g.5gb"
	giIDRule      = "the profile's id as nvidia-smi mig -lgip shows it (0 or more), e.g. 19"
	giMemoryRule  = "the instance's memory in MiB as NVML states it (nvidia-smi mig -lgip's GiB times 1024), e.g. 16384 for an H200's 1g.18gb; within framebuffer-mb"
)

const sourceRule = "one line naming where the types, ids and sizes come from (a document and section, a URL, a source file)"

func gimSchedRule() string { return strings.Join(GIMSchedulers(), ", ") }

const gimIntervalRule = "0 (GIM's default, 6 ms) to 2000"

const nvTimesliceRule = "1 to 30 (0 or unset: the driver's)"

func nvPolicyRule() string { return strings.Join(NVSchedulerPolicies(), ", ") }

const xeU32Rule = "0 (unlimited, xe's default) to 4294967295"

const xeQuotaRule = "pinned (the equal share of what the PF can give) or a size in MiB or GiB, a multiple of 2 MiB, split times it within framebuffer-mb"

func xePriorityRule() string { return strings.Join(XePriorities(), ", ") }

func dialectList() string {
	ds := knownDialects()
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = string(d)
	}
	return strings.Join(s, ", ")
}
