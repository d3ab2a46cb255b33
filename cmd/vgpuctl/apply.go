package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/profile"
)

// errDrift makes assert exit 1 after printing the drift.
var errDrift = errors.New("the host differs from the config")

// errNotApplied makes apply exit non-zero after printing its report.
type errNotApplied struct{ rep api.ReconcileReport }

func (e errNotApplied) Error() string {
	if e.rep.Error != "" {
		return e.rep.Error
	}
	return fmt.Sprintf("the host is not as the config wants: %d GPUs refused (vGPUs in use), %d failed", e.rep.Refused, e.rep.Failed)
}

// Is lets exitCode give a refusal the in-use code.
func (e errNotApplied) Is(target error) bool {
	return target == errInUseRefusal && e.rep.Refused > 0 && e.rep.Failed == 0 && e.rep.Error == ""
}

var errInUseRefusal = errors.New("refused: in use")

func readConfigFile(path string) ([]byte, *config.Config, error) {
	if path == "" {
		return nil, nil, usage.Errorf("-f FILE is required: the host config to apply (docs/config.md)")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, usage.Errorf("read host config: %w", err)
	}
	cfg, err := config.Parse(path, data)
	if err != nil {
		return nil, nil, usage.Wrap(err)
	}
	return data, cfg, nil
}

func newApplyCmd(g *globals) *cobra.Command {
	var file, cfgPath string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Make FILE the host config and bring the host to it",
		Long: `Validate the host config FILE against this host and the profile catalog, make it the
host's config and reconcile: carve every GPU it names with its profile, uncarve the
GPUs vgpud carved for an earlier config that FILE no longer names, and bring back
allocated mdevs that are missing. vGPUs in use are never destroyed: such a GPU is
reported as refused (exit 3). Each GPU is reported: its profile, the steps applied,
what refused it. A config that manages a GPU, VF or virtual mdev parent on which
mdevctl starts mdevs itself (a definition with start auto in --mdevctl-dir) is
refused whole (exit 2), one line per parent: vgpud shares no parent with mdevctl
(vgpuctl import mdevctl prints the config that takes them over).

When vgpud answers on --socket, FILE is sent to it: vgpud writes it to its config
path and reconciles. Otherwise vgpuctl does the same in process, with the ledger in
--state-dir opened directly (as at boot, before vgpud starts): FILE is written to
--config unless it is that file, open intents of a crashed vgpud are repaired, and
the host is reconciled with vgpud's own code.`,
		Example: `  vgpuctl apply -f /etc/vgpud/config.yaml
  vgpuctl apply -f new.yaml --dry-run`,
		Args: usage.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, cfg, err := readConfigFile(file)
			if err != nil {
				return err
			}
			var rep api.ReconcileReport
			if c := g.vgpud(cmd.Context()); c != nil {
				rep, err = c.ApplyFile(cmd.Context(), file, data, dryRun)
			} else {
				var cat *profile.Catalog
				if cat, err = g.catalog(); err == nil {
					rep, err = g.local().Apply(cmd.Context(), cat, data, cfg, cfgPath, dryRun)
				}
			}
			if err != nil {
				return err
			}
			if err := printReport(cmd.OutOrStdout(), g, file, rep); err != nil {
				return err
			}
			if !rep.OK() {
				return errNotApplied{rep}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "host config to apply (required)")
	cmd.Flags().StringVar(&cfgPath, "config", config.DefaultPath, "without vgpud: where the host config lives (FILE is copied there)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "validate and print what a reconcile would do; change nothing")
	return cmd
}

func printReport(w io.Writer, g *globals, file string, rep api.ReconcileReport) error {
	if g.output == "json" {
		return writeJSON(w, rep)
	}
	for _, r := range rep.Repaired {
		fmt.Fprintf(w, "repaired: %s\n", r)
	}
	if rep.Error != "" {
		_, err := fmt.Fprintf(w, "apply %s: not applied: %s\n", file, rep.Error)
		return err
	}
	dry := ""
	if strings.Contains(rep.Reason, "dry run") {
		dry = " (dry run)"
	}
	fmt.Fprintf(w, "apply %s%s: %d GPUs, %d changed, %d refused, %d failed\n", file, dry, len(rep.GPUs), rep.Changed, rep.Refused, rep.Failed)
	if len(rep.GPUs) == 0 {
		return nil
	}
	var rows [][]string
	for _, r := range rep.GPUs {
		result := "as wanted"
		switch {
		case r.Error != "":
			result = "failed: " + r.Error
		case len(r.Refused) > 0:
			result = "refused, in use: " + strings.Join(blockerList(r.Refused), ", ")
		case len(r.Ops) > 0 && dry != "":
			result = fmt.Sprintf("would apply %d steps", len(r.Ops))
		case len(r.Ops) > 0:
			result = fmt.Sprintf("changed: %d steps", len(r.Ops))
		}
		if len(r.Restored) > 0 {
			result += fmt.Sprintf("; %d allocated mdevs restored", len(r.Restored))
		}
		rows = append(rows, []string{r.GPU, orDash(r.Profile), r.Action, result})
	}
	if err := table(w, []string{"GPU", "PROFILE", "ACTION", "RESULT"}, rows); err != nil {
		return err
	}
	for _, r := range rep.GPUs {
		for i, o := range r.Ops {
			fmt.Fprintf(w, "  %s %2d. %s\n", r.GPU, i+1, o)
		}
	}
	return nil
}

func newAssertCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "assert -f FILE",
		Short: "Exit 1 and print the drift when the host differs from FILE",
		Long: `Compare the host with the host config FILE without changing anything, as NVIDIA's
mig-parted assert does: for every GPU, the profile FILE wants and the one it carries,
with the steps a reconcile would apply; GPUs vgpud carved for an earlier config that
FILE no longer names; and allocated vGPUs that are missing from the host.

Exit codes: 0 the host matches FILE, 1 it differs (the drift is printed), 2 FILE is
not a valid config for this host (this too: it manages a parent on which mdevctl
starts mdevs, see vgpuctl apply --help). Uses vgpud when it answers on --socket, else reads
the host and the ledger in --state-dir directly.`,
		Example: `  vgpuctl assert -f /etc/vgpud/config.yaml && echo host is as configured`,
		Args:    usage.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, cfg, err := readConfigFile(file)
			if err != nil {
				return err
			}
			var rep api.AssertReport
			if c := g.vgpud(cmd.Context()); c != nil {
				if rep, err = c.AssertFile(cmd.Context(), file, data); err != nil {
					return err
				}
			} else {
				cat, err := g.catalog()
				if err != nil {
					return err
				}
				l := g.local().ReadLedger()
				if l != nil {
					defer l.Close()
				}
				rep = engine.Assert(cmd.Context(), engine.AssertInput{FS: g.fs(), Catalog: cat, Config: cfg, Ledger: l, MIG: g.mig(),
					MdevctlDir: g.mdevctlDir()})
			}
			if rep.Error != "" {
				return usage.Wrap(errors.New(rep.Error))
			}
			if err := printAssert(cmd.OutOrStdout(), g, file, rep); err != nil {
				return err
			}
			if !rep.Match {
				return errDrift
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "host config to compare with (required)")
	return cmd
}

func printAssert(w io.Writer, g *globals, file string, rep api.AssertReport) error {
	if g.output == "json" {
		return writeJSON(w, rep)
	}
	if rep.Match {
		_, err := fmt.Fprintf(w, "the host matches %s\n", file)
		return err
	}
	if len(rep.GPUs) > 0 {
		fmt.Fprintf(w, "%d GPUs differ from %s:\n", len(rep.GPUs), file)
		var rows [][]string
		for _, d := range rep.GPUs {
			todo := fmt.Sprintf("%d steps", len(d.Ops))
			switch {
			case d.Error != "":
				todo = "cannot: " + d.Error
			case len(d.Blocked) > 0:
				todo += "; in use: " + strings.Join(blockerList(d.Blocked), ", ")
			}
			rows = append(rows, []string{d.GPU, orDash(d.Desired), orDash(d.Actual), todo})
		}
		if err := table(w, []string{"GPU", "DESIRED", "ACTUAL", "TO DO"}, rows); err != nil {
			return err
		}
		for _, d := range rep.GPUs {
			for i, o := range d.Ops {
				fmt.Fprintf(w, "  %s %2d. %s\n", d.GPU, i+1, o)
			}
		}
	}
	if len(rep.Missing) > 0 {
		fmt.Fprintf(w, "%d allocated vGPUs are missing:\n", len(rep.Missing))
		var rows [][]string
		for _, m := range rep.Missing {
			rows = append(rows, []string{m.VGPU, m.GPU, m.Profile, m.State, m.DomainName + " (" + m.DomainUUID + ")"})
		}
		return table(w, []string{"VGPU", "GPU", "PROFILE", "STATE", "DOMAIN"}, rows)
	}
	return nil
}

func blockerList(bs []api.Blocker) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.VGPU + " (" + b.Holder + ")"
	}
	return out
}
