package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/sim/kernel/fusefs"
	"github.com/vgpu-project/vgpu/internal/usage"
)

func newFaultCmd() *cobra.Command {
	var (
		req   fusefs.FaultRequest
		hold  bool
		clear bool
	)
	cmd := controlCmd(&cobra.Command{
		Use:   "fault --control SOCK --path P [--nth N] [--errno E] [--always] [--hold] | --clear",
		Short: "Make a write to a path fail (or wait) in a running vgpusim",
		Long: `Arm a fault: the n-th write to P from now (1-based; paths compare after resolving
symlinks, so /sys/bus/pci/devices/X/... and /sys/devices/.../X/... are one file) fails
with errno E and has no effect. --always fails the n-th and every later write.

--hold instead makes that write wait before it reaches the kernel until it is
released (vgpusim release, or fault --clear): a test can kill the writer in the middle
of a multi-step change. A held write ignores signals, as a blocking kernel write does.

--clear disarms every fault and lets held writes reach the kernel. Prints the fault
id as JSON.`,
		Example: `  vgpusim fault --control /tmp/sim.sock --path /sys/bus/pci/devices/0000:03:00.0/sriov_numvfs --errno EBUSY
  vgpusim fault --control /tmp/sim.sock --path /sys/bus/pci/drivers_probe --nth 2 --always
  vgpusim fault --control /tmp/sim.sock --path /sys/bus/pci/devices/0000:03:00.0/sriov_numvfs --hold
  vgpusim fault --control /tmp/sim.sock --clear`,
	}, func(cmd *cobra.Command, c *fusefs.Client) (any, error) {
		if clear {
			if req.Path != "" || hold || req.Always || req.Errno != "" || cmd.Flags().Changed("nth") {
				return nil, usage.Errorf("--clear takes no other fault flags")
			}
			n, err := c.ClearFaults(cmd.Context())
			return fusefs.ReleaseReply{Released: n}, err
		}
		if req.Path == "" {
			return nil, usage.Errorf("--path is required (an absolute host path such as /sys/bus/pci/devices/0000:03:00.0/sriov_numvfs), or --clear")
		}
		if hold {
			if req.Errno != "" {
				return nil, usage.Errorf("--hold takes no --errno: give it to vgpusim release to fail the held write")
			}
			req.Kind = fusefs.KindHold
		} else if _, err := fusefs.ParseErrno(req.Errno); err != nil {
			return nil, usage.Wrap(err)
		}
		return c.Inject(cmd.Context(), req)
	})
	f := cmd.Flags()
	f.StringVar(&req.Path, "path", "", "absolute host path of the attribute, e.g. /sys/bus/pci/devices/0000:03:00.0/sriov_numvfs")
	f.IntVar(&req.Nth, "nth", 1, "which write from now (1-based)")
	f.StringVar(&req.Errno, "errno", "", "errno name or number the write fails with (default EIO)")
	f.BoolVar(&req.Always, "always", false, "fail the n-th and every later write")
	f.BoolVar(&hold, "hold", false, "hold the write until released instead of failing it")
	f.BoolVar(&clear, "clear", false, "disarm every fault and release held writes")
	return cmd
}

func newReleaseCmd() *cobra.Command {
	var req fusefs.ReleaseRequest
	cmd := controlCmd(&cobra.Command{
		Use:   "release --control SOCK [--path P] [--errno E]",
		Short: "Let held writes go on (to the kernel, or failing with E)",
	}, func(cmd *cobra.Command, c *fusefs.Client) (any, error) {
		if req.Errno != "" {
			if _, err := fusefs.ParseErrno(req.Errno); err != nil {
				return nil, usage.Wrap(err)
			}
		}
		n, err := c.Release(cmd.Context(), req)
		return fusefs.ReleaseReply{Released: n}, err
	})
	cmd.Flags().StringVar(&req.Path, "path", "", "release the holds on this path only")
	cmd.Flags().StringVar(&req.Errno, "errno", "", "fail the held writes with this errno instead of letting them reach the kernel")
	return cmd
}

func newHoldsCmd() *cobra.Command {
	return controlCmd(&cobra.Command{
		Use:   "holds --control SOCK",
		Short: "List armed holds and how many writes each holds now (JSON)",
	}, func(cmd *cobra.Command, c *fusefs.Client) (any, error) {
		return c.Holds(cmd.Context())
	})
}

// newCountCmd is "writes" (writes that reached an attribute) or "opens"
// (open handles on a device node).
func newCountCmd(what string) *cobra.Command {
	var path string
	short := "Count the writes that reached the attribute at P (JSON)"
	if what == "opens" {
		short = "Count the open handles on the device node at P (JSON)"
	}
	cmd := controlCmd(&cobra.Command{
		Use:   what + " --control SOCK --path P",
		Short: short,
	}, func(cmd *cobra.Command, c *fusefs.Client) (any, error) {
		if path == "" {
			return nil, usage.Errorf("--path is required")
		}
		get := c.Writes
		if what == "opens" {
			get = c.Opens
		}
		n, err := get(cmd.Context(), path)
		return fusefs.Count{Path: path, Count: n}, err
	})
	cmd.Flags().StringVar(&path, "path", "", "absolute host path")
	return cmd
}

func newProcCmd() *cobra.Command {
	var req fusefs.ProcRequest
	var readable bool
	cmd := controlCmd(&cobra.Command{
		Use:   "proc --control SOCK --pid PID --unreadable | --readable",
		Short: "Hide a process's open files from readers of /proc, as without CAP_SYS_PTRACE",
		Long: `Make the open files of process PID unreadable through the mount's /proc: readlink of
/proc/PID/fd/N answers EACCES, as the real /proc answers a reader without CAP_SYS_PTRACE
about another user's process (or a root one with capabilities the reader lacks). Listing
the directory still works. It holds for the process's files now and later; --readable
undoes it. Prints the request as JSON.`,
		Example: `  vgpusim proc --control /tmp/sim.sock --pid 4242 --unreadable`,
	}, func(cmd *cobra.Command, c *fusefs.Client) (any, error) {
		if req.PID <= 0 {
			return nil, usage.Errorf("--pid is required (the id of a process holding a node open in the mount)")
		}
		if req.Unreadable == readable {
			return nil, usage.Errorf("give one of --unreadable and --readable")
		}
		return req, c.SetFDsUnreadable(cmd.Context(), req.PID, req.Unreadable)
	})
	cmd.Flags().IntVar(&req.PID, "pid", 0, "the process")
	cmd.Flags().BoolVar(&req.Unreadable, "unreadable", false, "hide its open files")
	cmd.Flags().BoolVar(&readable, "readable", false, "show its open files again")
	return cmd
}

// controlCmd makes cmd a client of the control socket: it takes the
// required --control flag, runs call, and prints its result as JSON.
func controlCmd(cmd *cobra.Command, call func(*cobra.Command, *fusefs.Client) (any, error)) *cobra.Command {
	var socket string
	cmd.Args = usage.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if socket == "" {
			return usage.Errorf("--control is required (the socket given to vgpusim serve --control)")
		}
		c := fusefs.NewClient(socket)
		defer c.Close()
		v, err := call(cmd, c)
		if err != nil {
			return err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode reply: %w", err)
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
		return err
	}
	cmd.Flags().StringVar(&socket, "control", "", "control socket of a running vgpusim serve (required)")
	return cmd
}
