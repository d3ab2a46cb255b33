package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

func newGPUsCmd(g *globals) *cobra.Command {
	var why bool
	cmd := &cobra.Command{
		Use:   "gpus [GPU]",
		Short: "List the GPUs of the host and what each can be split into",
		Long: `List every GPU physical function (display and processing-accelerator class) with its
vendor and model name, NUMA node, IOMMU group, driver, framebuffer, the dialects this
host can carve it in now (sriov, mdev, sriov-mdev, nvidia-vf, passthrough), the splits
its profiles can make now (1 for the built-in passthrough) and the profile it carries
now. Virtual mdev parents (for example the kernel's mbochs sample) follow.

FB is NVML's memory total for an NVIDIA MIG-capable GPU (an H200's 143771 MiB) where
a vGPU dialect can be carved now (-o json: wherever the nvidia module is loaded), else
what sysfs says ("-" where nothing does): the table does not start NVML's helper for
a GPU that offers passthrough alone.

What cannot be carved now is left out of DIALECTS and SPLITS; --why lists it, a line
per catalog file (or dialect) with the reason: no IOMMU group (enable the IOMMU), no
SR-IOV capability (this OS is a guest, or SR-IOV is off in firmware), not NVIDIA's
vGPU host driver (the datacenter driver has no vGPU), and whatever the hardware lacks.
With a GPU address, show that GPU alone; -o json gives every detail: VFs, mdev types
with available instances, NVIDIA per-VF types, the NVIDIA driver, and "unavailable",
each dialect that cannot be carved now with its reason.`,
		Example: `  vgpuctl gpus
  vgpuctl gpus --why
  vgpuctl gpus 0000:3b:00.0 -o json`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: g.completeGPUs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f := g.fs()
			names := g.names() // read once: pci.ids is the largest file a listing reads
			gpus, err := inventory.Discover(f, names)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				a, err := pci.ParseAddress(args[0])
				if err != nil {
					return usage.Wrap(err)
				}
				i := slices.IndexFunc(gpus, func(x inventory.GPU) bool { return x.Address == a })
				if i < 0 {
					return fmt.Errorf("%s: %w", a, inventory.ErrNotGPU)
				}
				gpus = gpus[i : i+1]
			}
			parents, err := inventory.MdevParents(f, names)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				parents = nil
			}
			cat, err := g.catalog()
			if err != nil {
				return err
			}
			m := g.mig()
			for i := range gpus {
				// The table needs NVML's type ids only to tell what a GPU's
				// VFs carry; -o json shows the types themselves. What the
				// host stands in the way of needs no NVML; whether this OS
				// is a guest, where sysfs cannot say, only a listing that
				// says why asks.
				if g.output == "json" || hasVFs(gpus[i]) {
					carve.EnrichWith(m, cat, &gpus[i])
				} else {
					carve.CatalogUnavailable(cat, &gpus[i])
				}
				if g.output == "json" || why {
					carve.GuestWith(m, &gpus[i])
				}
				// A MIG-capable GPU's framebuffer is NVML's total; the
				// table asks only where a vGPU could be carved, for the
				// helper's start would double the time of a look at a GPU
				// that offers passthrough alone (an H200 in a VM).
				if g.output == "json" || vgpuDialect(gpus[i]) {
					carve.SizesWith(m, cat, &gpus[i])
				}
			}
			if g.output == "json" {
				return writeJSON(cmd.OutOrStdout(), struct {
					GPUs        []inventory.GPU        `json:"gpus"`
					MdevParents []inventory.MdevParent `json:"mdevParents,omitempty"`
				}{gpus, parents})
			}
			var rows [][]string
			for _, x := range gpus {
				var ns []int
				for _, p := range cat.Usable(x) {
					ns = append(ns, p.Split)
				}
				slices.Sort(ns)
				var splits []string
				for _, n := range slices.Compact(ns) {
					splits = append(splits, fmt.Sprint(n))
				}
				dialects := make([]string, len(x.Dialects))
				for i, d := range x.Dialects {
					dialects[i] = string(d)
				}
				rows = append(rows, []string{x.Address.String(), x.VendorName, modelName(x, cat), orDash(x.Driver),
					intOrDash(x.NUMANode), intOrDash(x.IOMMUGroup), mb(x.FramebufferMB),
					orDash(strings.Join(dialects, ",")), orDash(strings.Join(splits, ",")), orDash(carve.ProfileOfSched(x, cat, m))})
			}
			for _, p := range parents {
				var types []string
				for _, t := range p.Types {
					types = append(types, fmt.Sprintf("%s(%d)", t.ID, t.AvailableInstances))
				}
				rows = append(rows, []string{p.Name, "-", "mdev parent: " + strings.Join(types, " "), "-",
					"-", "-", "-", "mdev", "-", "-"})
			}
			w := cmd.OutOrStdout()
			if err := table(w, []string{"ADDRESS", "VENDOR", "MODEL", "DRIVER", "NUMA", "IOMMU", "FB", "DIALECTS", "SPLITS", "PROFILE"}, rows); err != nil {
				return err
			}
			if why {
				fmt.Fprintln(w)
				return whyNot(w, gpus, cat)
			}
			for _, x := range gpus {
				if len(x.Dialects) == 0 {
					fmt.Fprintf(g.stderr, "vgpuctl: nothing can be carved on %s now; vgpuctl gpus --why says why\n", x.Address)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&why, "why", false, "list what cannot be carved now, and why")
	return cmd
}

// vgpuDialect reports whether g can be carved into vGPUs now: a dialect
// other than passthrough is on offer.
func vgpuDialect(g inventory.GPU) bool {
	return slices.ContainsFunc(g.Dialects, func(d inventory.Dialect) bool { return d != inventory.DialectPassthrough })
}

// whyNot prints, a line each, the catalog files (and the built-in
// passthrough) whose profiles no GPU of gpus can make now, the dialects
// the GPUs would speak that the host stands in the way of, and what a
// passthrough would take from the host.
func whyNot(w io.Writer, gpus []inventory.GPU, cat *profile.Catalog) error {
	var rows [][]string
	for _, x := range gpus {
		addr := x.Address.String()
		var shown []inventory.Dialect
		for _, gr := range cat.Groups(x) {
			if len(gr.Fit) > 0 {
				continue
			}
			shown = append(shown, gr.Dialect)
			rows = append(rows, []string{addr, string(gr.Dialect), groupNames(gr.Profiles), gr.WhyNot})
		}
		for _, u := range x.Unavailable {
			if !slices.Contains(shown, u.Dialect) {
				rows = append(rows, []string{addr, string(u.Dialect), "-", u.Reason})
			}
		}
		if x.BootVGA && slices.Contains(x.Dialects, inventory.DialectPassthrough) {
			rows = append(rows, []string{addr, string(inventory.DialectPassthrough), profile.Passthrough,
				"only with --force: it drives the host's console (boot_vga 1)"})
		}
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "Nothing stands in the way: every profile of these GPUs can be carved now.")
		return err
	}
	return table(w, []string{"ADDRESS", "DIALECT", "PROFILES", "WHY NOT"}, rows)
}

// groupNames names a catalog file's profiles: all of a few, the first and
// last of many.
func groupNames(names []string) string {
	if len(names) <= 3 {
		return strings.Join(names, ",")
	}
	return fmt.Sprintf("%s..%s (%d)", names[0], names[len(names)-1], len(names))
}

// completeGPUs offers the host's GPU addresses.
func (g *globals) completeGPUs(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	gpus, err := inventory.Discover(g.fs(), nil)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var out []string
	for _, x := range gpus {
		out = append(out, x.Address.String())
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// hasVFs reports whether g has VFs enabled: only then can it have per-VF
// vGPUs, whose types NVML's ids may be needed to recognise (the NVML
// helper takes tens of milliseconds to start).
func hasVFs(g inventory.GPU) bool { return g.SRIOV != nil && g.SRIOV.NumVFs > 0 }

// modelName is pci.ids' name, or the catalog's when pci.ids predates the GPU.
func modelName(x inventory.GPU, cat *profile.Catalog) string {
	if !strings.HasPrefix(x.DeviceName, "0x") {
		return x.DeviceName
	}
	for _, p := range cat.ForGPU(x) {
		if !p.Builtin() {
			return p.Model.Name
		}
	}
	return x.DeviceName
}
