package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/simkernel"
	"github.com/vgpu-project/vgpu/internal/simtools"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// newToolCmd is a vendor tool of the simulated host, acting on the mount
// at --root: what the wrapper installed in the mount runs.
func newToolCmd(tool string) *cobra.Command {
	return &cobra.Command{
		Use:   tool + " --root DIR ARGS...",
		Short: "Run the simulated host's " + tool + " against the host mounted at DIR",
		Long: `Runs the vendor tool as the simulated host has it: the same sysfs writes, in the
same order, with the same messages and exit code as the real one (internal/simtools).
serve installs a wrapper at the tool's path in the mount (a symlink to it), so vgpud
and vgpuctl run it there as they run the real tool under /.`,
		Hidden:             true,
		DisableFlagParsing: true, // the tool's own flags (-e, -d) pass through
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 || args[0] != "--root" {
				return usage("%s: want --root DIR first", tool)
			}
			code := simtools.Run(cmd.Context(), sysfs.NewOS(args[1]), tool, args[2:], cmd.OutOrStdout())
			if code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
}

// exitCode ends vgpusim with a tool's own exit code, printing nothing more.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// installTools writes a wrapper per vendor tool of the host into a fresh
// directory and links the tool's path in the mount to it. It returns the
// directory, to be removed on exit ("" when the host has no tools).
func installTools(k *simkernel.Kernel, mount string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find vgpusim's own path for the tool wrappers: %w", err)
	}
	dir, err := os.MkdirTemp("", "vgpusim-tools-")
	if err != nil {
		return "", fmt.Errorf("create the tool wrapper directory: %w", err)
	}
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	for tool := range sysfs.DefaultToolPaths() {
		w := filepath.Join(dir, tool)
		script := fmt.Sprintf("#!/bin/sh\nexec %s %s --root %s \"$@\"\n", quote(self), tool, quote(mount))
		if err := os.WriteFile(w, []byte(script), 0o755); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("write the %s wrapper %s: %w", tool, w, err)
		}
		k.InstallTool(tool, w)
	}
	return dir, nil
}
