package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
)

func newVGPUsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "vgpus",
		Short: "List the carved vGPUs and whether each is in use",
		Long: `List every vGPU the host has now: VFs on vfio-pci, mediated devices, VFs with an
NVIDIA vGPU type, and whole GPUs on vfio-pci. IN USE is yes while a process (QEMU)
holds the vGPU's VFIO group open.`,
		Example: `  vgpuctl vgpus
  vgpuctl vgpus -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := g.fs()
			gpus, err := inventory.Discover(f, nil)
			if err != nil {
				return err
			}
			cat, err := g.catalog()
			if err != nil {
				return err
			}
			vs, err := carve.VGPUs(cmd.Context(), f, gpus, cat, carve.VFIOUsage{FS: f})
			if err != nil {
				return err
			}
			if g.output == "json" {
				if vs == nil {
					vs = []carve.VGPU{}
				}
				return writeJSON(cmd.OutOrStdout(), vs)
			}
			var rows [][]string
			for _, v := range vs {
				use := "no"
				if v.InUse {
					use = "yes"
				}
				rows = append(rows, []string{v.ID, string(v.Kind), v.GPU, orDash(v.Profile), orDash(v.Type),
					intOrDash(v.IOMMUGroup), orDash(v.Driver), use})
			}
			if len(rows) == 0 {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "no vGPUs carved; see vgpuctl profiles and vgpuctl carve")
				return err
			}
			return table(cmd.OutOrStdout(), []string{"VGPU", "KIND", "GPU", "PROFILE", "TYPE", "IOMMU", "DRIVER", "IN USE"}, rows)
		},
	}
}
