package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

func newGPUsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "gpus [GPU]",
		Short: "List the GPUs of the host and what each can be split into",
		Long: `List every GPU physical function (display and processing-accelerator class) with its
vendor and model name, NUMA node, IOMMU group, driver, framebuffer (NVML's memory total
for an NVIDIA MIG-capable GPU, where NVML answers), the dialects it
speaks (sriov, mdev, sriov-mdev, nvidia-vf, passthrough), the splits its catalog
profiles offer and the profile it carries now. Virtual mdev parents (for example the
kernel's mbochs sample) follow. With a GPU address, show that GPU alone; -o json
gives every detail: VFs, mdev types with available instances, NVIDIA per-VF types.`,
		Example: `  vgpuctl gpus
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
					return usageError{err}
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
				// VFs carry; -o json shows the types themselves.
				if g.output == "json" || hasVFs(gpus[i]) {
					carve.EnrichWith(m, cat, &gpus[i])
				}
				// A MIG-capable GPU's framebuffer is NVML's total.
				carve.SizesWith(m, cat, &gpus[i])
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
				for _, p := range cat.ForGPU(x) {
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
					strings.Join(dialects, ","), orDash(strings.Join(splits, ",")), orDash(carve.ProfileOfSched(x, cat, m))})
			}
			for _, p := range parents {
				var types []string
				for _, t := range p.Types {
					types = append(types, fmt.Sprintf("%s(%d)", t.ID, t.AvailableInstances))
				}
				rows = append(rows, []string{p.Name, "-", "mdev parent: " + strings.Join(types, " "), "-",
					"-", "-", "-", "mdev", "-", "-"})
			}
			return table(cmd.OutOrStdout(), []string{"ADDRESS", "VENDOR", "MODEL", "DRIVER", "NUMA", "IOMMU", "FB", "DIALECTS", "SPLITS", "PROFILE"}, rows)
		},
	}
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
	if ps := cat.ForGPU(x); len(ps) > 0 {
		return ps[0].Model.Name
	}
	return x.DeviceName
}
