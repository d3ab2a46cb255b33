//go:build cgo

package main

import (
	"sync"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/pkg/migrate/virtmigrate"
	"github.com/vgpu-project/vgpu/pkg/virt"
)

func (g *globals) migrate(cmd *cobra.Command, o migrateOpts) error {
	ctx := cmd.Context()
	src, err := virt.Connect(o.uri)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := virt.Connect(o.Dest)
	if err != nil {
		return err
	}
	defer dst.Close()
	cat, err := g.catalog()
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	var outMu sync.Mutex // migrations at once print to one terminal
	m := &virtmigrate.Migrator{Src: src, Dst: dst, Options: o.Options, Catalog: cat, Vgpud: g.vgpud, Socket: g.socket,
		Progress: func(domain string) virtmigrate.Progress {
			p := newProgress(out, &outMu, g.output == "json", o.Parallel == 1)
			p.domain = domain
			return p
		}}
	if !o.all {
		_, err = m.One(ctx, o.domain)
		return err
	}
	names, err := src.RunningDomains()
	if err != nil {
		return err
	}
	rows, failed := m.Drain(ctx, names)
	if g.output == "json" {
		js := make([]map[string]string, len(rows))
		for i, r := range rows {
			js[i] = map[string]string{"domain": r.Domain, "outcome": r.Outcome, "why": r.Why}
		}
		if err := writeJSON(out, js); err != nil {
			return err
		}
		return failed
	}
	tr := make([][]string, len(rows))
	for i, r := range rows {
		tr[i] = []string{r.Domain, r.Outcome, r.Why}
	}
	if err := table(out, []string{"DOMAIN", "OUTCOME", "WHY"}, tr); err != nil {
		return err
	}
	return failed
}
