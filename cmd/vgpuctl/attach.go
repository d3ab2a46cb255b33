package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/attach"
	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/virt"
)

// domainFlags are the flags attach and detach share with virsh.
type domainFlags struct {
	uri          string
	live, config bool
}

func (f *domainFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVarP(&f.uri, "connect", "c", "", "libvirt URI, as virsh -c (default: $LIBVIRT_DEFAULT_URI, else "+virt.DefaultURI+" as root)")
	fl.BoolVar(&f.config, "config", false, "change the persistent definition (the default)")
	fl.BoolVar(&f.live, "live", false, "change the running domain (hotplug); with --config, both")
}

func (f *domainFlags) affect() virt.Affect {
	a := virt.Affect(0)
	if f.config || !f.live {
		a |= virt.Config
	}
	if f.live {
		a |= virt.Live
	}
	return a
}

func newAttachCmd(g *globals) *cobra.Command {
	var df domainFlags
	var spec attach.Spec
	cmd := &cobra.Command{
		Use:   "attach DOMAIN --profile PROFILE [--count N]",
		Short: "Give a libvirt domain vGPUs of a profile",
		Long: `Add COUNT vGPUs of PROFILE to the libvirt domain DOMAIN (a name or UUID): a
hostdev for each, and a vgpu request element in the domain's metadata that
the vgpu hook reads at every start, stop, migration and restore.

A profile whose vGPUs are mediated devices (NVIDIA GRID, A100, Intel GVT-g)
gets a hostdev with an mdev UUID derived from the domain's UUID; vgpud creates
that mdev when the domain starts. A profile whose vGPUs are VFs or whole GPUs
(AMD MxGPU, NVIDIA per-VF vGPU, passthrough) gets the address of a VF that
vgpud reserves for the domain now, so vgpud must be running.

As virsh attach-device: the persistent definition changes by default, --live
changes the running domain (a VF only: an mdev is made at start), and both
flags change both. A --live attach has vgpud make the VFs ready first and
gives them back when libvirt refuses the hotplug. A domain holds vGPUs of one
profile; attaching again adds more of it. For a profile whose vendor driver
migrates, the definition also gets what QEMU needs to migrate the vGPU.`,
		Example: `  vgpuctl attach web01 --profile mi25-4g
  vgpuctl attach web01 --profile passthrough
  vgpuctl attach web01 --profile t4-4q --count 2 -c qemu+ssh://host2/system
  vgpuctl attach web01 --profile l40s-12q --live --config`,
		Args: exactArgs(1, "DOMAIN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if spec.Profile == "" {
				return usage.Errorf("--profile is required; see vgpuctl profiles")
			}
			if spec.Count < 1 || spec.Count > domxml.MaxCount {
				return usage.Errorf("--count %d: want 1 to %d", spec.Count, domxml.MaxCount)
			}
			cat, err := g.catalog()
			if err != nil {
				return err
			}
			p, ok := cat.Get(spec.Profile)
			if !ok {
				return usage.Errorf("%w %q; see vgpuctl profiles", profile.ErrUnknownProfile, spec.Profile)
			}
			spec.Kind = attach.KindOf(p.Model.Dialect)
			spec.Affect = df.affect()
			spec.Migration, _ = attach.MigrationProps(cat, spec.Profile)
			return g.withDomain(&df, args[0], func(d attach.Domain) error {
				res, err := attach.Attach(cmd.Context(), d, g.reservations(cmd.Context()), spec)
				if err != nil {
					return err
				}
				return printChange(cmd.OutOrStdout(), g, res)
			})
		},
	}
	df.add(cmd)
	cmd.Flags().StringVarP(&spec.Profile, "profile", "p", "", "profile of the vGPUs (see vgpuctl profiles)")
	cmd.Flags().IntVarP(&spec.Count, "count", "n", 1, "how many vGPUs to add")
	_ = cmd.RegisterFlagCompletionFunc("profile", g.completeProfiles)
	return cmd
}

func newDetachCmd(g *globals) *cobra.Command {
	var df domainFlags
	cmd := &cobra.Command{
		Use:   "detach DOMAIN [VGPU]...",
		Short: "Take vGPUs away from a libvirt domain",
		Long: `Remove from the libvirt domain DOMAIN the hostdevs of the given vGPUs (PCI
addresses or mdev UUIDs, as vgpuctl attach printed them), or of all its vGPUs,
and update its vgpu request element; the element goes with the last vGPU.

vgpud's reservation of a vGPU is released once neither the persistent nor the
running definition uses it. A VF still used by the running domain stays
reserved until the domain stops; run the same detach again then to release it.

--config (the default) and --live work as for vgpuctl attach.`,
		Example: `  vgpuctl detach web01
  vgpuctl detach web01 0000:03:00.2 --live --config`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usage.Errorf("%s takes a DOMAIN and optionally vGPUs; see %s --help", cmd.CommandPath(), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			spec := attach.DetachSpec{Affect: df.affect()}
			cat, err := g.catalog()
			if err != nil {
				return err
			}
			// The profile is the domain's; its catalog entry says whether
			// the remaining vGPUs keep migration overrides.
			spec.Catalog = cat
			for _, id := range args[1:] {
				n, err := attach.NormaliseID(id)
				if err != nil {
					return usage.Wrap(err)
				}
				spec.IDs = append(spec.IDs, n)
			}
			return g.withDomain(&df, args[0], func(d attach.Domain) error {
				res, err := attach.Detach(cmd.Context(), d, g.reservations(cmd.Context()), spec)
				if perr := printChange(cmd.OutOrStdout(), g, res); perr != nil && err == nil {
					err = perr
				}
				return err
			})
		},
	}
	df.add(cmd)
	return cmd
}

func (g *globals) completeProfiles(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	cat, err := g.catalog()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, p := range cat.Profiles() {
		names = append(names, p.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

func printChange(w io.Writer, g *globals, ch attach.Change) error {
	if g.output == "json" {
		if ch.Changed == nil {
			ch.Changed = []domxml.VGPU{}
		}
		return writeJSON(w, ch)
	}
	if len(ch.Changed) == 0 && len(ch.Released) == 0 {
		_, err := fmt.Fprintf(w, "%s has no vGPUs to detach; nothing to do\n", ch.Domain)
		return err
	}
	if len(ch.Changed) > 0 {
		dir := "to"
		if ch.Verb == "detached" {
			dir = "from"
		}
		fmt.Fprintf(w, "%s %d x %s %s %s (%s):\n", ch.Verb, len(ch.Changed), ch.Profile, dir, ch.Domain, ch.Affect)
		var rows [][]string
		for _, v := range ch.Changed {
			rows = append(rows, []string{"  " + v.ID(), string(v.Kind), fmt.Sprint(v.Index)})
		}
		if err := table(w, []string{"  VGPU", "KIND", "INDEX"}, rows); err != nil {
			return err
		}
	}
	switch {
	case len(ch.Changed) == 0:
	case ch.Verb == "attached" && ch.Request != nil:
		fmt.Fprintf(w, "%s now asks for %d x %s; vgpud makes them ready when %s starts\n", ch.Domain, ch.Request.Count, ch.Profile, ch.Domain)
	case ch.Verb == "detached" && ch.Request != nil:
		fmt.Fprintf(w, "%s now asks for %d x %s\n", ch.Domain, ch.Request.Count, ch.Profile)
	case ch.Verb == "detached":
		fmt.Fprintf(w, "%s asks for no vGPU any more\n", ch.Domain)
	}
	if len(ch.Released) > 0 {
		fmt.Fprintf(w, "released in vgpud: %s\n", strings.Join(ch.Released, ", "))
	}
	if len(ch.Kept) > 0 {
		kept := strings.Join(ch.Kept, " ")
		if ch.Affect == virt.Live.String() {
			fmt.Fprintf(w, "still reserved: the persistent config of %s uses %s; vgpuctl detach %s %s --config releases it\n", ch.Domain, kept, ch.Domain, kept)
		} else {
			fmt.Fprintf(w, "still reserved: the running %s uses %s; vgpuctl detach %s %s releases it after %s stops (or detach it --live)\n",
				ch.Domain, kept, ch.Domain, kept, ch.Domain)
		}
	}
	return nil
}
