package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

func newProfilesCmd(g *globals) *cobra.Command {
	var (
		gpu     string
		sources bool
	)
	cmd := &cobra.Command{
		Use:   "profiles",
		Short: "List the profile catalog and which GPUs of this host each fits",
		Long: `List the profile catalog: the built-in profiles plus those of --profiles directories.
A profile is an equal split of one GPU model: split N gives N vGPUs with 1/N of its
framebuffer each (a MIG-backed one its GPU instance's, as NVML states it). The built-in
profile passthrough, last, fits any GPU: the whole GPU and its IOMMU group to one VM.
HOST GPUS names this host's GPUs that can carry the profile now. With --gpu, the
profiles that GPU can carry now, FB/VGPU being what its vGPUs get as its hardware
states it (NVML's figures for an NVIDIA MIG-capable GPU); where none can, a line per
catalog file (and the built-in) says why (-o json: every profile of the GPU's model,
each that does not fit with its "whyNot"). --sources lists, per catalog file, its GPU
model and where its types, ids and sizes come from ("-" where the file does not say).`,
		Example: `  vgpuctl profiles
  vgpuctl profiles --gpu 0000:3b:00.0
  vgpuctl profiles --profiles /etc/vgpud/profiles.d -o json
  vgpuctl profiles --sources`,
		Args: usage.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cat, err := g.catalog()
			if err != nil {
				return err
			}
			if sources {
				return listSources(cmd, g, cat)
			}
			gpus, err := inventory.Discover(g.fs(), nil)
			if err != nil {
				return err
			}
			if gpu != "" {
				a, err := pci.ParseAddress(gpu)
				if err != nil {
					return usage.Wrap(err)
				}
				var keep []inventory.GPU
				for _, x := range gpus {
					if x.Address == a {
						keep = append(keep, x)
					}
				}
				if len(keep) == 0 {
					return fmt.Errorf("--gpu %s: %w", a, inventory.ErrNotGPU)
				}
				gpus = keep
			}
			// A type the catalog names only has its id from NVML: without
			// it the profile would not resolve, and no GPU would show it.
			// With --gpu, NVML's word on a guest too, for the reasons.
			m := g.mig()
			for i := range gpus {
				carve.EnrichWith(m, cat, &gpus[i])
				if gpu != "" {
					carve.GuestWith(m, &gpus[i])
				}
			}
			if gpu != "" {
				// The one GPU's sizes as NVML states them, where it can
				// (an NVIDIA MIG-capable GPU): what its vGPUs would get.
				carve.SizesWith(m, cat, &gpus[0])
			}
			type row struct {
				profile.Profile
				HostGPUs []string `json:"hostGPUs"`
				// GPUFramebufferMB is one vGPU's framebuffer on --gpu's GPU,
				// as its hardware states it.
				GPUFramebufferMB uint64 `json:"gpuFramebufferMB,omitempty"`
				// WhyNot, with --gpu, is why that GPU cannot carry it now.
				WhyNot string `json:"whyNot,omitempty"`
			}
			var out, unfit []row
			for _, p := range cat.Profiles() {
				r := row{Profile: p, HostGPUs: []string{}}
				for _, x := range gpus {
					pl, err := cat.Resolve(p.Name, x)
					switch {
					case err == nil:
						r.HostGPUs = append(r.HostGPUs, x.Address.String())
						if gpu != "" {
							r.GPUFramebufferMB = pl.FramebufferMB
						}
					case gpu != "" && p.Model.Matches(x.VendorID, x.DeviceID):
						r.WhyNot = err.Error()
					}
				}
				switch {
				case gpu == "" || len(r.HostGPUs) > 0:
					out = append(out, r)
				case r.WhyNot != "":
					unfit = append(unfit, r)
				}
			}
			if g.output == "json" {
				return writeJSON(cmd.OutOrStdout(), append(out, unfit...))
			}
			if gpu != "" && len(out) == 0 {
				// Never an empty table: why nothing fits, a file at a time.
				x := gpus[0]
				var rows [][]string
				for _, gr := range cat.Groups(x) {
					rows = append(rows, []string{groupNames(gr.Profiles), gr.Model, string(gr.Dialect), gr.WhyNot})
				}
				return table(cmd.OutOrStdout(), []string{"PROFILES", "GPU MODEL", "DIALECT", "WHY NOT (" + x.Address.String() + ")"}, rows)
			}
			var rows [][]string
			for _, r := range out {
				fb := r.GPUFramebufferMB
				if fb == 0 && r.Model.FramebufferMB > 0 {
					fb = r.FramebufferMB()
				}
				rows = append(rows, []string{r.Name, r.Model.Name, string(r.Model.Dialect), fmt.Sprintf("%d:1", r.Split),
					mb(fb), orDash(r.Profile.Backend()), orDash(strings.Join(r.HostGPUs, ","))})
			}
			return table(cmd.OutOrStdout(), []string{"PROFILE", "GPU MODEL", "DIALECT", "SPLIT", "FB/VGPU", "BACKEND", "HOST GPUS"}, rows)
		},
	}
	cmd.Flags().StringVar(&gpu, "gpu", "", "show only the profiles that fit this GPU (PCI address)")
	cmd.Flags().BoolVar(&sources, "sources", false, "list each catalog file's model and where its data comes from")
	_ = cmd.RegisterFlagCompletionFunc("gpu", g.completeGPUs)
	return cmd
}

// listSources prints one row per catalog file: model, file, source.
func listSources(cmd *cobra.Command, g *globals, cat *profile.Catalog) error {
	type src struct {
		Model  string `json:"model"`
		File   string `json:"file"`
		Source string `json:"source"`
	}
	var out []src
	seen := map[string]bool{}
	for _, p := range cat.Profiles() {
		if !seen[p.File] {
			seen[p.File] = true
			out = append(out, src{p.Model.Name, p.File, p.Model.Source})
		}
	}
	if g.output == "json" {
		return writeJSON(cmd.OutOrStdout(), out)
	}
	rows := make([][]string, len(out))
	for i, s := range out {
		rows[i] = []string{s.Model, s.File, orDash(s.Source)}
	}
	return table(cmd.OutOrStdout(), []string{"GPU MODEL", "FILE", "SOURCE"}, rows)
}
