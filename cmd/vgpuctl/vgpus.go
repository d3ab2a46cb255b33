package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

func newVGPUsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "vgpus",
		Short: "List the carved vGPUs and whether each is in use",
		Long: `List every vGPU the host has now: VFs on vfio-pci, mediated devices (of GPUs and
of virtual parents such as mbochs, whose GPU column is the parent's name), VFs with
an NVIDIA vGPU type, and whole GPUs on vfio-pci. IN USE is yes while a process (QEMU)
holds the vGPU's VFIO group open, and unknown when nobody visible does but some
process's open files could not be read (without CAP_SYS_PTRACE another user's, or a
more privileged process's, are hidden; a warning names them): a change that would
destroy such a vGPU is refused unless --force. When vgpud runs, the list comes from it
and shows each vGPU's STATE in its ledger (free, reserved, attached, releasing,
leased) and the DOMAIN holding it.`,
		Example: `  vgpuctl vgpus
  vgpuctl vgpus -o json`,
		Args: usage.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c := g.vgpud(cmd.Context()); c != nil {
				return listHeld(cmd.Context(), cmd.OutOrStdout(), g, c)
			}
			vs, warning, err := g.local().VGPUs(cmd.Context(), g.catalog)
			if err != nil {
				return err
			}
			warnUse(g, warning)
			return printVGPUs(cmd.OutOrStdout(), g, vs, "no vGPUs carved; see vgpuctl profiles and vgpuctl carve",
				[]string{"VGPU", "KIND", "GPU", "PROFILE", "TYPE", "IOMMU", "DRIVER", "IN USE"},
				func(v vgpu.VGPU) []string {
					return []string{v.ID, string(v.Kind), v.GPU, orDash(v.Profile), orDash(v.Type),
						intOrDash(v.IOMMUGroup), orDash(v.Driver), useWord(v.InUse, v.UseUnknown)}
				})
		},
	}
}

// useWord is a vGPU's IN USE: yes, no, or unknown when a process whose
// open files could not be read may hold it.
func useWord(inUse, useUnknown bool) string {
	switch {
	case inUse:
		return "yes"
	case useUnknown:
		return "unknown"
	}
	return "no"
}

// warnUse prints, once, why some vGPUs' use is unknown.
func warnUse(g *globals, warning string) {
	if warning != "" {
		fmt.Fprintf(g.stderr, "vgpuctl: warning: %s\n", warning)
	}
}

// listHeld prints vgpud's view: the vGPUs with the domain holding each.
func listHeld(ctx context.Context, w io.Writer, g *globals, c *client.Client) error {
	vs, warning, err := c.VGPUsWarning(ctx)
	if err != nil {
		return err
	}
	warnUse(g, warning)
	return printVGPUs(w, g, vs, "no vGPUs carved; see vgpuctl profiles and vgpuctl apply",
		[]string{"VGPU", "KIND", "GPU", "PROFILE", "TYPE", "IOMMU", "DRIVER", "STATE", "DOMAIN", "IN USE"},
		func(v api.VGPU) []string {
			dom := "-"
			if v.DomainName != "" {
				dom = v.DomainName + " (" + v.DomainUUID + ")"
			}
			return []string{v.ID, string(v.Kind), v.GPU, orDash(v.Profile), orDash(v.Type),
				intOrDash(v.IOMMUGroup), orDash(v.Driver), v.State, dom, useWord(v.InUse, v.UseUnknown)}
		})
}

// printVGPUs prints a vGPU list in g's output: JSON ([] for none), the line
// none when there are none, or a table of header with row's cells for each.
func printVGPUs[V any](w io.Writer, g *globals, vs []V, none string, header []string, row func(V) []string) error {
	if g.output == "json" {
		if vs == nil {
			vs = []V{}
		}
		return writeJSON(w, vs)
	}
	if len(vs) == 0 {
		_, err := fmt.Fprintln(w, none)
		return err
	}
	rows := make([][]string, 0, len(vs))
	for _, v := range vs {
		rows = append(rows, row(v))
	}
	return table(w, header, rows)
}
