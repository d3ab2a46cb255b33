package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/importer"
	"github.com/vgpu-project/vgpu/pkg/vgpudm"
)

// errNotAllImported makes an import exit 1 after printing the config of
// what did map.
type errNotAllImported struct{ n int }

func (e errNotAllImported) Error() string {
	return fmt.Sprintf("%d not imported (named above, and in the config's header); the config leaves them out", e.n)
}

func newImportCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import",
		Short: "Print the host config that takes over mdevctl's definitions or a vgpu-device-manager config",
		Long: `Print, on stdout, the vgpud host config (docs/config.md) that reproduces what
another tool describes, so that a host can move to vgpud: each GPU gets the catalog
profile whose vGPU type, count and settings the tool's description asks for. What does
not map to a profile (mixed types on one GPU, a type no profile has, a count that is not
an equal split) is named on stderr, one line each, and in the config's header, and left
out of the config: nothing is guessed. Exit 0 when everything was imported, 1 when
something was left out (the config of the rest is still printed), 2 on bad input.

Nothing on the host changes. Review the config, then vgpuctl apply -f it. docs/import.md
says how a host moves over.`,
		Args: usage.NoArgs,
	}
	cmd.AddCommand(newImportMdevctlCmd(g), newImportVGPUDMCmd(g))
	return cmd
}

func newImportMdevctlCmd(g *globals) *cobra.Command {
	var parent string
	cmd := &cobra.Command{
		Use:   "mdevctl [--parent GPU]",
		Short: "Print the host config that reproduces mdevctl's persistent mdev definitions",
		Long: `Read mdevctl's definitions (--mdevctl-dir, /etc/mdevctl.d/<parent>/<uuid>) and print the
vgpud host config that reproduces them: an entry per GPU (definitions on its VFs count
as the GPU's) or virtual mdev parent, with the profile whose mdev type is the
definitions' type on that GPU's model, whose vgpu_params are those their
nvidia/vgpu_params attr sets, and whose split holds them all.

The definitions' UUIDs are pinned in each entry's mdev-uuids (docs/config.md), where
they fit: vgpud's carve keeps a pinned mdev that runs, makes the others, and makes
them all again after a reboot, so domains whose XML names them start as before. A
UUID another entry pins already, or whose mdev runs on another parent, is not
pinned: each definition's comment says which, and why. The config's header lists the
mdevctl modify --manual commands to run before applying it, since vgpud refuses a
parent on which mdevctl starts mdevs itself.`,
		Example: `  vgpuctl import mdevctl > /etc/vgpud/config.yaml.new
  vgpuctl import mdevctl --parent 0000:3b:00.0`,
		Args: usage.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir := g.mdevctlDir()
			if dir == "" {
				return usage.Errorf("no mdevctl directory on this host; give --mdevctl-dir")
			}
			cat, err := g.catalog()
			if err != nil {
				return err
			}
			r, err := importer.Mdevctl(importer.MdevctlInput{FS: g.fs(), Dir: dir, Catalog: cat, Parent: parent})
			if errors.Is(err, importer.ErrNoDefinitions) {
				return usage.Wrap(err)
			}
			if err != nil {
				return err
			}
			return printImport(cmd.OutOrStdout(), cmd.ErrOrStderr(), g, r)
		},
	}
	cmd.Flags().StringVar(&parent, "parent", "", "import one GPU (PCI address; its VFs' definitions with it) or virtual mdev parent (name) only")
	_ = cmd.RegisterFlagCompletionFunc("parent", g.completeGPUs)
	return cmd
}

func newImportVGPUDMCmd(g *globals) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "vgpu-device-manager FILE [--config NAME]",
		Short: "Print the host config that reproduces a config of NVIDIA's vgpu-device-manager",
		Long: `Read FILE, a config of NVIDIA's vgpu-device-manager (version: v1, vgpu-configs), as strictly
as the tool reads it, and print the vgpud host config that reproduces its vgpu-config
NAME (the tool's -c; the only one when the file has one): each entry's GPUs get the
catalog profile of its vGPU type whose split is its count. devices: all becomes an
all entry, a device-filter an id entry, a GPU index the address of the GPU this host
numbers so (its NVIDIA GPUs in PCI address order, as the tool counts them). An entry
of more than one type, no type, a count that is not a profile's split, a subsystem
filter, an index this host lacks, or entries selecting the same GPUs (the tool applies
the later) are named instead.`,
		Example: `  vgpuctl import vgpu-device-manager config.yaml --config T4-4Q
  vgpuctl import vgpu-device-manager /etc/nvidia/vgpu-dm.yaml --config default -o json`,
		Args: exactArgs(1, "FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return usage.Errorf("read vgpu-device-manager config: %w", err)
			}
			spec, err := vgpudm.Decode(args[0], data)
			if err != nil {
				return usage.Wrap(err)
			}
			if _, err := spec.Select(name); err != nil {
				return usage.Wrap(err)
			}
			cat, err := g.catalog()
			if err != nil {
				return err
			}
			r, err := importer.VGPUDM(importer.VGPUDMInput{Spec: spec, Config: name, FS: g.fs(), Catalog: cat})
			if err != nil {
				return err
			}
			return printImport(cmd.OutOrStdout(), cmd.ErrOrStderr(), g, r)
		},
	}
	cmd.Flags().StringVar(&name, "config", "", "the vgpu-config to import (required when FILE has more than one)")
	return cmd
}

// printImport writes the config (or, with -o json, the import with it) and
// names on stderr what was left out.
func printImport(stdout, stderr io.Writer, g *globals, r importer.Result) error {
	y, err := r.YAML()
	if err != nil {
		return err
	}
	if g.output == "json" {
		err = writeJSON(stdout, struct {
			importer.Result
			Config string `json:"config"`
		}{r, string(y)})
	} else {
		_, err = stdout.Write(y)
	}
	if err != nil {
		return err
	}
	for _, s := range r.Skipped {
		fmt.Fprintln(stderr, "vgpuctl: not imported:", s)
	}
	if len(r.Skipped) > 0 {
		return errNotAllImported{len(r.Skipped)}
	}
	return nil
}
