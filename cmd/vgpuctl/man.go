//go:build cgo

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newManCmd writes the man pages. It lives in the cgo build, vgpuctl-libvirt:
// the renderer (cobra/doc, blackfriday) costs every start of the static one.
func newManCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write man pages for vgpuctl and its commands into DIR",
		Hidden: true,
		Args:   exactArgs(1, "DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return fmt.Errorf("create man directory %s: %w", args[0], err)
			}
			root.DisableAutoGenTag = true
			hdr := &doc.GenManHeader{Title: "VGPUCTL", Section: "1", Source: "vgpu", Manual: "vgpu manual"}
			if err := doc.GenManTree(root, hdr, args[0]); err != nil {
				return fmt.Errorf("write man pages to %s: %w", args[0], err)
			}
			return nil
		},
	}
}
