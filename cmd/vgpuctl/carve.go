package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/api/convert"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/mdevctl"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

func newCarveCmd(g *globals) *cobra.Command {
	var prof string
	var opt carve.Options
	cmd := &cobra.Command{
		Use:   "carve GPU --profile PROFILE",
		Short: "Split a GPU into vGPUs by a profile",
		Long: `Carve GPU (a PCI address) into the vGPUs PROFILE describes: enable and bind VFs,
create mediated devices, or set NVIDIA per-VF types. GPU may also name a virtual
mdev parent (one with no PCI device, such as the kernel's mbochs sample), carved
into mediated devices by a profile that matches it. While vgpud runs, the change
goes through it. vgpuctl first plans the difference between the GPU and the profile and does nothing when they already match.
Every step has an undo: if one fails, the steps before it are undone and the GPU is
left as it was. A change that would destroy a vGPU in use (its VFIO group open) is
refused unless --force is given. A GPU (or one of its VFs, or a virtual parent) on
which mdevctl starts mdevs itself (a definition with start auto in --mdevctl-dir) is
refused (exit 2): vgpud shares no parent with mdevctl.

Every GPU has the built-in profile passthrough: the whole GPU to one VM, on vfio-pci
with the other functions of its IOMMU group (its HD audio); uncarve gives each its
driver back. It is refused, a dry run too, for the GPU that drives the host's console
(boot_vga) and where the group holds a device the host uses (a NIC, a disk, another
GPU), unless --force, which takes them from the host until the uncarve. A refusal
says why: no IOMMU group, no SR-IOV capability, not NVIDIA's vGPU host driver.`,
		Example: `  vgpuctl carve 0000:03:00.0 --profile mi25-4g
  vgpuctl carve 0000:01:00.0 --profile passthrough
  vgpuctl carve 0000:3b:00.0 --profile t4-4q --dry-run
  vgpuctl carve mbochs --profile lab-mbochs-64m --profiles e2e/lab/profiles`,
		Args:              exactArgs(1, "GPU"),
		ValidArgsFunction: g.completeGPUs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := vgpu.ParseTarget(args[0])
			if err != nil {
				return usage.Wrap(err)
			}
			if prof == "" {
				return usage.Errorf("--profile is required; see vgpuctl profiles --gpu %s", args[0])
			}
			if c := g.vgpud(cmd.Context()); c != nil { // vgpud owns every write
				req := api.CarveRequest{GPU: gpuField(t), Parent: t.Parent, Profile: prof, Force: opt.Force, DryRun: opt.DryRun}
				ans, err := c.Carve(cmd.Context(), req)
				return reportAnswer(cmd.OutOrStdout(), g, "carve", ans, opt, err)
			}
			if err := mdevctl.Check(g.fs(), g.mdevctlDir(), []mdevctl.Target{{Target: t}}); err != nil {
				return err
			}
			cat, err := g.catalog()
			if err != nil {
				return err
			}
			c, done, err := g.local().Carver(cat)
			if err != nil {
				return err
			}
			defer done()
			opt.OnForced = forcedNotice(cmd.ErrOrStderr())
			res, err := c.Carve(cmd.Context(), t, prof, opt)
			return report(cmd.OutOrStdout(), g, "carve", res, opt, err)
		},
	}
	cmd.Flags().StringVarP(&prof, "profile", "p", "", "profile to carve (see vgpuctl profiles)")
	cmd.Flags().BoolVar(&opt.Force, "force", false, "destroy vGPUs in use (the kernel waits for their users to let go); pass through the console's GPU or the host's devices in its IOMMU group")
	cmd.Flags().BoolVar(&opt.DryRun, "dry-run", false, "print the plan without changing anything")
	_ = cmd.RegisterFlagCompletionFunc("profile", g.completeProfiles)
	return cmd
}

func newUncarveCmd(g *globals) *cobra.Command {
	var opt carve.Options
	cmd := &cobra.Command{
		Use:   "uncarve GPU",
		Short: "Remove every vGPU of a GPU and give it back its original driver",
		Long: `Remove the vGPUs of GPU: mediated devices, NVIDIA per-VF types and VFs, and move a
GPU that vgpu put on vfio-pci back to the driver it had. GPU may also name a virtual
mdev parent (mbochs): its mediated devices are removed. vGPUs in use (their VFIO
group open) are not destroyed unless --force is given.`,
		Example: `  vgpuctl uncarve 0000:03:00.0
  vgpuctl uncarve 0000:03:00.0 --dry-run -o json`,
		Args:              exactArgs(1, "GPU"),
		ValidArgsFunction: g.completeGPUs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := vgpu.ParseTarget(args[0])
			if err != nil {
				return usage.Wrap(err)
			}
			if c := g.vgpud(cmd.Context()); c != nil {
				req := api.UncarveRequest{GPU: gpuField(t), Parent: t.Parent, Force: opt.Force, DryRun: opt.DryRun}
				ans, err := c.Uncarve(cmd.Context(), req)
				return reportAnswer(cmd.OutOrStdout(), g, "uncarve", ans, opt, err)
			}
			c, done, err := g.local().Carver(nil)
			if err != nil {
				return err
			}
			defer done()
			opt.OnForced = forcedNotice(cmd.ErrOrStderr())
			res, err := c.Uncarve(cmd.Context(), t, opt)
			return report(cmd.OutOrStdout(), g, "uncarve", res, opt, err)
		},
	}
	cmd.Flags().BoolVar(&opt.Force, "force", false, "destroy vGPUs in use; the kernel waits for their users to let go")
	cmd.Flags().BoolVar(&opt.DryRun, "dry-run", false, "print the plan without changing anything")
	return cmd
}

// reportAnswer reports vgpud's answer to a carve or uncarve as report does
// a local one; an answer that does not convert is the error if vgpud gave none.
func reportAnswer(w io.Writer, g *globals, verb string, ans api.CarveResult, opt carve.Options, err error) error {
	res, cerr := convert.Result(ans)
	if cerr != nil && err == nil {
		err = cerr
	}
	return report(w, g, verb, res, opt, err)
}

// report prints a carve's plan and outcome; the error, if any, goes up.
func report(w io.Writer, g *globals, verb string, res carve.Result, opt carve.Options, err error) error {
	if g.output == "json" {
		if jerr := writeJSON(w, struct {
			carve.Result
			DryRun bool   `json:"dryRun"`
			Error  string `json:"error,omitempty"`
		}{res, opt.DryRun, errString(err)}); jerr != nil {
			return jerr
		}
		return err
	}
	if err != nil && res.Plan.GPU.IsZero() && res.Plan.Parent == "" {
		return err
	}
	switch {
	case res.Plan.Empty():
		fmt.Fprintf(w, "%s %s: nothing to do, already as wanted\n", verb, res.Plan.Target())
	case opt.DryRun:
		fmt.Fprintf(w, "%s %s would:\n%s", verb, res.Plan.Target(), res.Plan)
		why := ""
		for _, b := range res.Plan.Blocked {
			if b.Unknown {
				fmt.Fprintf(w, "    use unknown: %s\n", b.VGPU)
				why = strings.TrimPrefix(b.Holder, "use unknown: ")
				continue
			}
			fmt.Fprintf(w, "    in use: %s (%s)\n", b.VGPU, b.Holder)
		}
		if why != "" {
			fmt.Fprintf(w, "    (use unknown: %s)\n", why)
		}
	case err == nil:
		fmt.Fprintf(w, "%s %s: done, %d steps\n%s", verb, res.Plan.Target(), res.Applied, res.Plan)
	}
	return err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// exactArgs is cobra.ExactArgs with a message naming the argument and a
// usage exit code.
func exactArgs(n int, name string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usage.Errorf("%s takes %d argument (%s), got %d; see %s --help", cmd.CommandPath(), n, name, len(args), cmd.CommandPath())
		}
		return nil
	}
}

// gpuField is a request's gpu field for t: the GPU's address, or empty
// for a virtual parent, which the parent field names.
func gpuField(t vgpu.Target) string {
	if t.IsParent() {
		return ""
	}
	return t.GPU.String()
}

// forcedNotice tells the admin, before a forced change writes, why it may
// not end soon: without vgpud, vgpuctl itself waits in the kernel.
func forcedNotice(w io.Writer) func([]vgpu.Blocker) {
	return func(bs []vgpu.Blocker) {
		held := make([]string, len(bs))
		for i, b := range bs {
			held[i] = b.VGPU + " (" + b.Holder + ")"
		}
		fmt.Fprintf(w, "vgpuctl: --force: destroying vGPUs in use: %s; the kernel removes each only once its user lets go "+
			"(it asks the VM to), and vgpuctl waits until then (Ctrl-C does not end that wait)\n", strings.Join(held, ", "))
	}
}
