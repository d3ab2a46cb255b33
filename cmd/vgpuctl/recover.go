package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/engine"
)

type recoverOpts struct {
	uri, cfgPath  string
	dryRun, force bool
}

func newRecoverLedgerCmd(g *globals) *cobra.Command {
	var o recoverOpts
	cmd := &cobra.Command{
		Use:   "recover-ledger",
		Short: "Rebuild a damaged ledger from the host and libvirt, keeping the damaged file",
		Long: `Rebuild vgpud's ledger (--state-dir/ledger.db) when vgpud refuses to start on it
(an empty file, a file cut short, damaged pages). The damaged file is never
mapped or changed: it stays beside the new one as ledger.db.damaged-TIME, for a
backup restore or a report.

What the new ledger holds:
  - each GPU (or virtual mdev parent) the host config names and that carries
    its profile, as carved for the config;
  - each vGPU a domain's vgpu request names, attached when the domain runs,
    reserved when it is shut off. Domains come from libvirt (--connect): it must
    answer, since without them reserved vGPUs would be handed to other domains.
Leases of incoming migrations and interrupted changes are not rebuilt: they are
short-lived, and vgpud's reconcile repairs the host at start.

What the host does not tell is printed as a note and left for the admin: a
domain whose XML does not parse, a vGPU two domains name (the running one keeps
it), a vGPU a process holds that no domain names, the driver a passed-through
GPU had before vfio-pci.

vgpud must not run. A ledger that opens and checks fine is left alone unless
--force.`,
		Example: `  systemctl stop vgpud
  vgpuctl recover-ledger --dry-run
  vgpuctl recover-ledger && systemctl start vgpud`,
		Args: usage.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := g.recoverLedger(cmd.Context(), o)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			return printRecover(cmd.OutOrStdout(), res)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.uri, "connect", "c", "", "libvirt URI, as virsh -c (default: $LIBVIRT_DEFAULT_URI, else qemu:///system as root)")
	fl.StringVar(&o.cfgPath, "config", config.DefaultPath, "the host config vgpud runs with")
	fl.BoolVar(&o.dryRun, "dry-run", false, "print what the new ledger would hold; change nothing")
	fl.BoolVar(&o.force, "force", false, "rebuild even a ledger that opens and checks fine (it is kept too)")
	return cmd
}

// recoverLedger rebuilds the ledger while no vgpud runs, from the host
// and libvirt's domains.
func (g *globals) recoverLedger(ctx context.Context, o recoverOpts) (engine.RecoverResult, error) {
	path := filepath.Join(g.stateDir, engine.LedgerFile)
	res := engine.RecoverResult{Ledger: path, DryRun: o.dryRun}
	if c := g.vgpud(ctx); c != nil {
		return res, fmt.Errorf("recover the ledger %s: vgpud answers on %s, so it trusts its ledger; stop it first", path, g.socket)
	}
	// Domains first: without libvirt nothing is rebuilt.
	domains, err := g.knownDomains(o.uri)
	if err != nil {
		return res, fmt.Errorf("recover the ledger %s: %w; the rebuild needs libvirt's domains to know which vGPUs they hold", path, err)
	}
	return engine.RecoverLedger(ctx, engine.RecoverOptions{StateDir: g.stateDir, ConfigPath: o.cfgPath, Domains: domains, FS: g.fs(),
		Catalog: g.catalog, DryRun: o.dryRun, Force: o.force})
}

func printRecover(w io.Writer, r engine.RecoverResult) error {
	verb := "rebuilt"
	if r.DryRun {
		verb = "would rebuild"
	}
	fmt.Fprintf(w, "%s %s from the host and libvirt", verb, r.Ledger)
	if r.Kept != "" {
		fmt.Fprintf(w, "; the old file is kept as %s", r.Kept)
	}
	fmt.Fprintln(w)
	for _, c := range r.Carved {
		on := c.Parent
		if on == "" {
			on = c.GPU.String()
		}
		fmt.Fprintf(w, "carved for the config: %s %s\n", on, c.Profile)
	}
	if len(r.Allocations) > 0 {
		rows := make([][]string, 0, len(r.Allocations))
		for _, a := range r.Allocations {
			rows = append(rows, []string{a.VGPU, a.Profile, string(a.State), a.DomainName, a.DomainUUID})
		}
		if err := table(w, []string{"VGPU", "PROFILE", "STATE", "DOMAIN", "UUID"}, rows); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(w, "no domain holds a vGPU")
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	if !r.DryRun {
		_, err := fmt.Fprintln(w, "start vgpud now (systemctl start vgpud): its reconcile repairs the host")
		return err
	}
	return nil
}
