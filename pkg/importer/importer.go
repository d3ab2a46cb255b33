package importer

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"

	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

// Result is one import: the config entries, and what was left out.
type Result struct {
	// Header says what was read and what the config does with it: comment
	// lines at the top of the YAML.
	Header []string `json:"header"`
	// Entries are the config's gpus, each with the comment lines written
	// above it.
	Entries []Entry `json:"entries"`
	// Skipped names each thing that did not map, and why: one line each.
	Skipped []string `json:"skipped"`
	// Commands are shell lines to run before the config is applied.
	Commands []string `json:"commands,omitempty"`
}

// Entry is one item of the config's gpus.
type Entry struct {
	config.Entry
	Comment []string `json:"comment,omitempty"`
}

// YAML writes r as a host config, with its header, the commands and what
// was skipped as comments. It is checked with config.Parse: an import never
// prints a config vgpud would refuse to read.
func (r Result) YAML() ([]byte, error) {
	var b bytes.Buffer
	comment := func(indent, line string) {
		if line == "" {
			fmt.Fprintf(&b, "%s#\n", indent)
			return
		}
		fmt.Fprintf(&b, "%s# %s\n", indent, line)
	}
	for _, l := range r.Header {
		comment("", l)
	}
	if len(r.Commands) > 0 {
		comment("", "")
		comment("", "Before vgpuctl apply -f with this file, run:")
		for _, c := range r.Commands {
			comment("", "  "+c)
		}
	}
	if len(r.Skipped) > 0 {
		comment("", "")
		comment("", fmt.Sprintf("Not imported (%d):", len(r.Skipped)))
		for _, s := range r.Skipped {
			comment("", "  "+s)
		}
	}
	b.WriteString("version: v1\n")
	if len(r.Entries) > 0 {
		b.WriteString("gpus:\n")
	}
	for _, e := range r.Entries {
		for _, c := range e.Comment {
			comment("  ", c)
		}
		switch {
		case !e.Address.IsZero():
			fmt.Fprintf(&b, "  - address: %s\n", strconv.Quote(e.Address.String()))
		case !e.ID.IsZero():
			fmt.Fprintf(&b, "  - id: %s\n", strconv.Quote(e.ID.String()))
		case e.All:
			b.WriteString("  - all: true\n")
		default:
			fmt.Fprintf(&b, "  - parent: %s\n", strconv.Quote(e.Parent))
		}
		fmt.Fprintf(&b, "    profile: %s\n", e.Profile)
		if len(e.MdevUUIDs) > 0 {
			b.WriteString("    mdev-uuids:\n")
			for _, u := range e.MdevUUIDs {
				fmt.Fprintf(&b, "      - %s\n", u)
			}
		}
	}
	if _, err := config.Parse("the imported config", b.Bytes()); err != nil {
		return nil, fmt.Errorf("import made a config vgpud would refuse: %w", err)
	}
	return b.Bytes(), nil
}

// check resolves the entries against the host, as vgpud will: two entries
// that select one GPU here are an error (a bug of the import, which names
// such entries instead).
func (r Result) check(gpus []inventory.GPU, cat *profile.Catalog) error {
	cfg := config.Default()
	cfg.Path = "the imported config"
	for _, e := range r.Entries {
		cfg.GPUs = append(cfg.GPUs, e.Entry)
	}
	if _, err := cfg.Desired(gpus, cat); err != nil {
		return fmt.Errorf("import made a config vgpud would refuse on this host: %w", err)
	}
	_, err := cfg.DesiredParents(cat)
	return err
}

// plain reports whether p sets nothing beyond its type and split that the
// other tool could have set: no scheduler, mixed-size mode, GIM or xe
// options. vgpu_params are compared apart.
func plain(p profile.Profile) bool {
	return p.Scheduler == nil && !p.MixedSize && p.GIM == nil && p.Xe == nil
}

// sameParams compares vgpu_params as sets.
func sameParams(a, b []profile.VGPUParam) bool {
	key := func(ps []profile.VGPUParam) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = fmt.Sprintf("%s=%d", p.Name, p.Value)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}

// names lists profile names for messages.
func names(ps []profile.Profile) string {
	if len(ps) == 0 {
		return "none"
	}
	return profile.Names(ps)
}

// typeName is a profile's vGPU type name as the hardware gives it
// ("GRID T4-4Q"), "" for a dialect without one.
func typeName(p profile.Profile) string {
	if p.NVIDIA.Name != "" {
		return p.NVIDIA.Name
	}
	return p.Mdev.Name
}

// describe names a GPU for comments: "0000:3b:00.0 (NVIDIA Tesla T4)".
func describe(g inventory.GPU, cat *profile.Catalog) string {
	for _, p := range cat.ForGPU(g) {
		return fmt.Sprintf("%s (%s)", g.Address, p.Model.Name)
	}
	return fmt.Sprintf("%s (%04x:%04x)", g.Address, g.VendorID, g.DeviceID)
}
