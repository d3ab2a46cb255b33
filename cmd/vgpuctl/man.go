package main

import "github.com/spf13/cobra"

// newManCmd writes the man pages (writeMan): vgpuctl-libvirt renders them,
// the static build hands the command to it, because the renderer
// (cobra/doc, blackfriday) would cost every start of the static one.
func newManCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write man pages for vgpuctl and its commands into DIR",
		Hidden: true,
		Args:   exactArgs(1, "DIR"),
		RunE:   func(_ *cobra.Command, args []string) error { return writeMan(root, args[0]) },
	}
}
