package profile

import (
	"bytes"
	"fmt"
	"strconv"

	"gopkg.in/yaml.v3"
)

// The file as written, for Encode. Decode does not use these: it walks the
// nodes itself to say where a problem is.
type yamlFile struct {
	Version       string     `yaml:"version"`
	Model         string     `yaml:"model"`
	Match         yamlMatch  `yaml:"match"`
	Dialect       string     `yaml:"dialect"`
	FramebufferMB uint64     `yaml:"framebuffer-mb,omitempty"`
	Migration     *yamlMig   `yaml:"migration,omitempty"`
	Source        string     `yaml:"source,omitempty"`
	Profiles      []yamlSpec `yaml:"profiles"`
}

type yamlMig struct {
	StopCopy      string `yaml:"stop-copy"`
	Pause         bool   `yaml:"pause"`
	DirtyTracking string `yaml:"dirty-tracking"`
}

type yamlMatch struct {
	Vendor     string   `yaml:"vendor,omitempty"`
	Devices    []string `yaml:"devices,omitempty,flow"`
	MdevParent string   `yaml:"mdev-parent,omitempty"`
}

type yamlSpec struct {
	Name        string    `yaml:"name"`
	Split       int       `yaml:"split"`
	MdevType    *yamlType `yaml:"mdev-type,omitempty,flow"`
	NVIDIAType  *yamlType `yaml:"nvidia-type,omitempty,flow"`
	GPUInstance *yamlGI   `yaml:"gpu-instance,omitempty,flow"`
	GIM         *yamlGIM  `yaml:"gim,omitempty,flow"`
	Xe          *yamlXe   `yaml:"xe,omitempty,flow"`
	Scheduler   *yamlNVS  `yaml:"nvidia-scheduler,omitempty,flow"`
	MixedSize   bool      `yaml:"nvidia-mixed-size,omitempty"`
	Params      yaml.Node `yaml:"vgpu-params,omitempty"`
	Description string    `yaml:"description,omitempty"`
}

type yamlGI struct {
	Profile  string `yaml:"profile"`
	ID       int    `yaml:"id"`
	MemoryMB uint64 `yaml:"memory-mb,omitempty"`
}

type yamlGIM struct {
	Scheduler  string `yaml:"scheduler"`
	IntervalMS int    `yaml:"interval-ms,omitempty"`
}

type yamlNVS struct {
	Policy      string `yaml:"policy"`
	TimesliceMS int    `yaml:"timeslice-ms,omitempty"`
	Adaptive    bool   `yaml:"adaptive,omitempty"`
}

type yamlXe struct {
	ExecQuantumMS    uint32 `yaml:"exec-quantum-ms,omitempty"`
	PreemptTimeoutUS uint32 `yaml:"preempt-timeout-us,omitempty"`
	Priority         string `yaml:"sched-priority,omitempty"`
	VRAMQuota        string `yaml:"vram-quota,omitempty"`
}

type yamlType struct {
	ID   any    `yaml:"id,omitempty"` // string for mdev, int for NVIDIA; nil: by name only
	Name string `yaml:"name"`
}

// Encode writes f in the catalog schema; Decode reads it back equal.
func Encode(f *File) ([]byte, error) {
	y := yamlFile{
		Version:       f.Version,
		Model:         f.Model.Name,
		Match:         yamlMatch{MdevParent: f.Model.MdevParent},
		Dialect:       string(f.Model.Dialect),
		FramebufferMB: f.Model.FramebufferMB,
		Source:        f.Model.Source,
	}
	if m := f.Model.Migration; m != nil {
		y.Migration = &yamlMig{StopCopy: fmt.Sprint(m.StopCopyMB), Pause: !m.NoPause, DirtyTracking: m.DirtyTracking}
		if m.StopCopyFramebuffer {
			y.Migration.StopCopy = "framebuffer"
		}
	}
	if f.Model.MdevParent == "" {
		y.Match.Vendor = fmt.Sprintf("%04x", f.Model.VendorID)
	}
	for _, d := range f.Model.DeviceIDs {
		y.Match.Devices = append(y.Match.Devices, fmt.Sprintf("%04x", d))
	}
	for _, s := range f.Profiles {
		ys := yamlSpec{Name: s.Name, Split: s.Split, Description: s.Description}
		if s.Mdev != (MdevType{}) {
			ys.MdevType = &yamlType{Name: s.Mdev.Name}
			if s.Mdev.ID != "" {
				ys.MdevType.ID = s.Mdev.ID
			}
		}
		if s.NVIDIA != (NVIDIAType{}) {
			ys.NVIDIAType = &yamlType{Name: s.NVIDIA.Name}
			if s.NVIDIA.ID != 0 {
				ys.NVIDIAType.ID = s.NVIDIA.ID
			}
		}
		if g := s.GPUInstance; g != nil {
			ys.GPUInstance = &yamlGI{Profile: g.Profile, ID: g.ID, MemoryMB: g.StatedMB}
		}
		if s.GIM != nil {
			ys.GIM = &yamlGIM{Scheduler: s.GIM.Scheduler, IntervalMS: s.GIM.IntervalMS}
		}
		ys.MixedSize = s.MixedSize
		if x := s.Scheduler; x != nil {
			ys.Scheduler = &yamlNVS{Policy: x.Policy, TimesliceMS: x.TimesliceMS, Adaptive: x.Adaptive}
		}
		if x := s.Xe; x != nil {
			ys.Xe = &yamlXe{ExecQuantumMS: x.ExecQuantumMS, PreemptTimeoutUS: x.PreemptTimeoutUS, Priority: x.Priority, VRAMQuota: x.VRAMQuota}
		}
		if len(s.Params) > 0 { // a mapping in the spec's order
			ys.Params = yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
			for _, x := range s.Params {
				ys.Params.Content = append(ys.Params.Content,
					&yaml.Node{Kind: yaml.ScalarNode, Value: x.Name},
					&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(x.Value)})
			}
		}
		y.Profiles = append(y.Profiles, ys)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(y); err != nil {
		return nil, fmt.Errorf("encode profile file %s: %w", f.Path, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode profile file %s: %w", f.Path, err)
	}
	return b.Bytes(), nil
}
