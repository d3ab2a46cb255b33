package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/attach"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/mdevctl"
	"github.com/vgpu-project/vgpu/pkg/migrate"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvstaterpc"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/version"
)

// Exit codes scripts can branch on; documented in the root help.
const (
	exitOK      = 0
	exitFailed  = 1 // the operation failed; the host is as it was
	exitUsage   = 2 // bad flags, address, profile or other input
	exitInUse   = 3 // refused: it would destroy a vGPU in use (see --force)
	exitPartial = 4 // a change may be left partly done: a step and its undo failed, or vgpud went away during it
	exitAborted = 5 // a migration was aborted or failed and rolled back: the VM runs on the source
	exitPending = 6 // a forced change still waits for a VM to let go of a vGPU; it goes on in vgpud
)

// env is what vgpuctl takes from the outside world; tests replace it.
type env struct {
	stdout, stderr io.Writer
	openFS         func(root string) sysfs.FS
	// reserver reaches vgpud for attach and detach; nil: vgpud is not running.
	reserver attach.Reserver
	// listDomains lists libvirt's domains for recover-ledger; nil: libvirt at the URI.
	listDomains func(uri string) ([]engine.KnownDomain, error)
}

// globals are the persistent flags.
type globals struct {
	env
	sysfsRoot   string
	sriovManage string
	amdSMI      string
	mdevctl     string // --mdevctl-dir
	output      string
	profileDirs []string
	stateDir    string
	pciIDs      string
	socket      string

	// The vgpud answering on socket, once probed (nil: none).
	probed bool
	daemon *client.Client
}

func run(ctx context.Context, args []string, e env) int {
	g := &globals{env: e}
	root := newRoot(g)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	err := usage.Execute(ctx, root, args)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(e.stderr, "vgpuctl:", err)
	return exitCode(err)
}

func exitCode(err error) int {
	switch {
	case errors.Is(err, carve.ErrUndo), errors.Is(err, client.ErrPartial), errors.Is(err, migrate.ErrUndo), errors.Is(err, client.ErrGone),
		errors.Is(err, attach.ErrUndo):
		return exitPartial
	case errors.Is(err, migrate.ErrAborted), errors.Is(err, migrate.ErrFailed):
		return exitAborted
	case errors.Is(err, client.ErrPending):
		return exitPending
	case errors.Is(err, carve.ErrInUse), errors.Is(err, client.ErrInUse), errors.Is(err, errInUseRefusal),
		errors.Is(err, alloc.ErrAttached), errors.Is(err, carve.ErrHostConsole), errors.Is(err, carve.ErrGroupShared):
		return exitInUse
	case usage.Is(err), errors.Is(err, attach.ErrBadInput), errors.Is(err, client.ErrBadRequest), errors.Is(err, client.ErrNotFound),
		errors.Is(err, config.ErrInvalid), errors.Is(err, engine.ErrConfig), errors.Is(err, engine.ErrLedgerSound), errors.Is(err, engine.ErrAmbiguous), errors.Is(err, profile.ErrInvalid), errors.Is(err, profile.ErrUnknownProfile),
		errors.Is(err, profile.ErrWrongGPU), errors.Is(err, profile.ErrCannotSplit), errors.Is(err, inventory.ErrNotGPU),
		errors.Is(err, inventory.ErrIsVF), errors.Is(err, pci.ErrNoDevice), errors.Is(err, mdev.ErrNoParent),
		errors.Is(err, mdevctl.ErrAutostart):
		return exitUsage
	}
	return exitFailed
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "vgpuctl",
		Short: "List, carve and uncarve the virtual GPUs of a host",
		Long: `vgpuctl shows the GPUs of a Linux/KVM host, the profiles each can be split into,
and carves them into vGPUs: SR-IOV VFs on vfio-pci (AMD MxGPU), mediated devices
(NVIDIA GRID, Intel GVT-g), NVIDIA per-VF vGPU types (Ada/Hopper) or the whole GPU
for passthrough. A profile names an equal split of one GPU model's framebuffer.

Exit codes:
  0  success
  1  the operation failed; the host is as it was
  2  bad input: flags, PCI address, profile name, a split the GPU cannot make
  3  refused: the change would destroy a vGPU in use, or pass through the GPU of
     the host's console or one whose IOMMU group holds a device of the host (add --force)
  4  a change may be left partly done: a step failed and undoing it failed too
     (run the command again to repair), or vgpud went away during it (its
     restart repairs or finishes it)
  5  a migration was aborted or failed and rolled back: the VM still runs on the source
  6  a forced carve or uncarve still waits for a VM to let go of a vGPU (vgpud
     asks the kernel, which asks the VM); it goes on in vgpud, which logs its end`,
		Example: `  vgpuctl gpus
  vgpuctl profiles --gpu 0000:03:00.0
  vgpuctl carve 0000:03:00.0 --profile mi25-4g
  vgpuctl vgpus -o json
  vgpuctl uncarve 0000:03:00.0`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if g.output != "table" && g.output != "json" {
				return usage.Errorf("--output %q: allowed values are table, json", g.output)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(usage.FlagError)
	pf := root.PersistentFlags()
	pf.StringVar(&g.sysfsRoot, "sysfs-root", "/", "directory holding the host's sys/, dev/ and vendor tools (a vgpusim mount for a simulated host)")
	pf.StringVar(&g.sriovManage, "sriov-manage", "", "NVIDIA's sriov-manage, which enables an NVIDIA GPU's VFs (default: usr/lib/nvidia/sriov-manage under --sysfs-root)")
	pf.StringVar(&g.amdSMI, "amd-smi", "", "new AMD GIM's amd-smi, which sets an MI300X/MI350X/V710's VF count (default: usr/bin/amd-smi under --sysfs-root)")
	pf.StringVar(&g.mdevctl, "mdevctl-dir", "", "mdevctl's definitions, which import mdevctl reads; without vgpud (which checks its own), a change managing an mdev parent mdevctl starts mdevs on (start auto) is refused (default: etc/mdevctl.d under --sysfs-root)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	pf.StringArrayVar(&g.profileDirs, "profiles", nil, "extra profile catalog directory (repeatable); the built-in catalog is always loaded")
	pf.StringVar(&g.stateDir, "state-dir", "/var/lib/vgpud", "vgpud's state (ledger, locks), used directly when vgpud does not run")
	pf.StringVar(&g.socket, "socket", api.DefaultSocket, "vgpud's API socket; when vgpud answers there, changes go through it")
	pf.StringVar(&g.pciIDs, "pci-ids", "", "pci.ids file for vendor and device names (default: the system's)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))

	root.AddCommand(newGPUsCmd(g), newProfilesCmd(g), newVGPUsCmd(g), newCarveCmd(g), newUncarveCmd(g),
		newAttachCmd(g), newDetachCmd(g), newReleaseCmd(g), newRecoverLedgerCmd(g), newMigrateCmd(g), newHookCmd(g), newApplyCmd(g), newAssertCmd(g), newImportCmd(g), newManCmd(root))
	usage.MarkArgs(root)
	return root
}

// mig is NVML's MIG and scheduler side: a simulated host's under
// --sysfs-root, else NVIDIA's in vgpu-nvml.
func (g *globals) mig() nvstate.Manager {
	return nvstaterpc.Open(g.sysfsRoot, "")
}

func (g *globals) fs() sysfs.FS {
	f := g.openFS(g.sysfsRoot)
	if o, ok := f.(sysfs.OS); ok && (g.sriovManage != "" || g.amdSMI != "") {
		o.Tools = map[string]string{sysfs.ToolSriovManage: g.sriovManage, sysfs.ToolAMDSMI: g.amdSMI}
		return o
	}
	return f
}

// mdevctlDir is mdevctl's definitions directory: --mdevctl-dir, else
// etc/mdevctl.d beside the host's sys/; "" for an in-process fake kernel
// (tests), which has no mdevctl.
func (g *globals) mdevctlDir() string {
	if g.mdevctl != "" {
		return g.mdevctl
	}
	if _, ok := g.openFS(g.sysfsRoot).(sysfs.OS); ok {
		return mdevctl.DirUnder(g.sysfsRoot)
	}
	return ""
}

func (g *globals) catalog() (*profile.Catalog, error) {
	c, err := profile.Load(g.profileDirs...)
	if err != nil {
		return nil, usage.Wrap(err)
	}
	return c, nil
}

func (g *globals) names() *inventory.Names {
	n, err := inventory.LoadNames(g.pciIDs)
	if err != nil {
		// Names are a nicety: ids still identify the GPU.
		fmt.Fprintf(g.stderr, "vgpuctl: warning: %v; showing numeric ids\n", err)
		return nil
	}
	return n
}
