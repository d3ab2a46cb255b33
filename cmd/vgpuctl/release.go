package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/engine"
)

func newReleaseCmd(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "release DOMAIN|UUID",
		Short: "Free every vGPU the ledger holds for a domain",
		Long: `Free the vGPUs vgpud holds for a domain (reserved, attached or leased), by the
name or UUID the ledger recorded. This is for domains that are gone (destroyed
and undefined, transient, migrated away) or whose vGPUs the admin takes back;
vgpud also frees the vGPUs of domains libvirt no longer knows on its own, after
a grace period. To take vGPUs from a domain that still exists, use vgpuctl
detach, which also edits its XML.

Only the ledger changes: no device is destroyed. It is refused while the domain
runs (libvirt says so, or its QEMU holds one of the vGPUs open) unless --force.
A domain the ledger holds nothing for, by name or UUID, "held nothing": that is
success (exit 0), so a release after vgpud's own collection, or a retried one,
does not fail.`,
		Example: `  vgpuctl release web01
  vgpuctl release 6c1f3e0a-2b4d-4e5f-8a9b-0c1d2e3f4a5b --force`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usage.Errorf("%s takes one DOMAIN name or UUID; see %s --help", cmd.CommandPath(), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			h, err := g.release(ctx, args[0], force)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return writeJSON(cmd.OutOrStdout(), h)
			}
			w := cmd.OutOrStdout()
			if len(h.Allocations)+len(h.Leases) == 0 {
				_, err := fmt.Fprintf(w, "domain %s held nothing: the ledger has no vGPU or lease of it (vgpuctl vgpus lists who holds what)\n", args[0])
				return err
			}
			for _, a := range h.Allocations {
				fmt.Fprintf(w, "freed %s (%s, was %s for %s %s)\n", a.VGPU, a.Profile, a.State, a.DomainName, a.DomainUUID)
			}
			for _, l := range h.Leases {
				fmt.Fprintf(w, "dropped the lease on %s (%s) of %s %s\n", l.VGPU, l.Profile, l.DomainName, l.DomainUUID)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "free even while the domain runs or its QEMU holds a vGPU")
	return cmd
}

// release frees what the ledger holds for the domain named or identified
// by who, through vgpud, or in process when vgpud does not run.
func (g *globals) release(ctx context.Context, who string, force bool) (api.Holdings, error) {
	if c := g.vgpud(ctx); c != nil {
		all, err := c.Allocations(ctx)
		if err != nil {
			return api.Holdings{}, err
		}
		u, err := engine.DomainOf(who, all)
		if err != nil || u == "" {
			return engine.NoHoldings(), err
		}
		return c.Free(ctx, u, force)
	}
	cat, err := g.catalog()
	if err != nil {
		return api.Holdings{}, err
	}
	return g.local().Release(ctx, cat, who, force)
}
