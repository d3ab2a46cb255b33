package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/durable"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/daemon"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

type recoverOpts struct {
	uri, cfgPath  string
	dryRun, force bool
}

// recoverResult is what recover-ledger did, for -o json.
type recoverResult struct {
	Ledger string `json:"ledger"`
	// Kept is where the old ledger file stays ("" when there was none).
	Kept   string `json:"kept,omitempty"`
	DryRun bool   `json:"dryRun,omitempty"`
	daemon.RebuildReport
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
		Args: cobra.NoArgs,
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

func (g *globals) recoverLedger(ctx context.Context, o recoverOpts) (recoverResult, error) {
	path := filepath.Join(g.stateDir, daemon.LedgerFile)
	res := recoverResult{Ledger: path, DryRun: o.dryRun}
	if c := g.vgpud(ctx); c != nil {
		return res, fmt.Errorf("recover the ledger %s: vgpud answers on %s, so it trusts its ledger; stop it first", path, g.socket)
	}
	// Domains first: without libvirt nothing is rebuilt.
	domains, err := g.knownDomains(o.uri)
	if err != nil {
		return res, fmt.Errorf("recover the ledger %s: %w; the rebuild needs libvirt's domains to know which vGPUs they hold", path, err)
	}
	_, statErr := os.Stat(path)
	exists := statErr == nil
	if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
		return res, fmt.Errorf("recover the ledger %s: %w", path, statErr)
	}
	if exists {
		old, err := ledger.Open(path, ledger.WithReadOnly())
		switch {
		case err == nil:
			_ = old.Close()
			if !o.force {
				return res, usage("the ledger %s opens and checks fine: nothing to recover (--force rebuilds it anyway, keeping this one)", path)
			}
		case errors.Is(err, ledger.ErrLocked):
			return res, fmt.Errorf("recover the ledger %s: %w: a vgpud holds it; stop it first", path, err)
		case !errors.Is(err, ledger.ErrDamaged):
			return res, fmt.Errorf("recover the ledger %s: %w", path, err)
		}
	}
	if exists {
		// Hold the old file's lock (bbolt's flock) until the new one is in
		// place: a vgpud starting meanwhile fails as "locked" instead of
		// running on a file about to be replaced.
		f, err := os.Open(path)
		if err != nil {
			return res, fmt.Errorf("recover the ledger %s: %w", path, err)
		}
		defer f.Close()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			return res, fmt.Errorf("recover the ledger %s: lock it: %w (is a vgpud starting?)", path, err)
		}
	}
	cfg, err := config.Load(o.cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		cfg, err = config.Default(), nil
	}
	if err != nil {
		return res, err
	}
	cat, err := g.catalog()
	if err != nil {
		return res, err
	}

	// Built aside, then put in place with one rename: a crash leaves
	// either the damaged file (vgpud refuses it) or the whole new one.
	tmp := path + ".rebuild"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("recover the ledger %s: remove the leftover %s: %w", path, tmp, err)
	}
	rep, err := rebuildInto(ctx, g, tmp, cfg, domains, cat)
	res.RebuildReport = rep
	if err != nil || o.dryRun {
		_ = os.Remove(tmp)
		return res, err
	}
	if exists {
		res.Kept = path + ".damaged-" + time.Now().UTC().Format("20060102T150405Z")
		if err := os.Link(path, res.Kept); err != nil {
			_ = os.Remove(tmp)
			return res, fmt.Errorf("recover the ledger %s: keep the old file as %s: %w", path, res.Kept, err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return res, fmt.Errorf("recover the ledger %s: put the rebuilt ledger in place: %w", path, err)
	}
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		return res, fmt.Errorf("recover the ledger %s: %w", path, err)
	}
	return res, nil
}

func rebuildInto(ctx context.Context, g *globals, path string, cfg *config.Config, domains []daemon.KnownDomain, cat *profile.Catalog) (daemon.RebuildReport, error) {
	l, err := ledger.Open(path)
	if err != nil {
		return daemon.RebuildReport{}, err
	}
	e, err := daemon.NewEngine(daemon.EngineOptions{FS: g.fs(), Ledger: l, Catalog: cat, Config: cfg,
		LockDir: filepath.Join(g.stateDir, daemon.LocksDir)})
	if err != nil {
		_ = l.Close()
		return daemon.RebuildReport{}, err
	}
	rep, err := e.Rebuild(ctx, domains)
	if cerr := l.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close the rebuilt ledger %s: %w", path, cerr)
	}
	return rep, err
}

func printRecover(w io.Writer, r recoverResult) error {
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
