//go:build cgo

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// writeMan renders root's man pages into dir.
func writeMan(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create man directory %s: %w", dir, err)
	}
	root.DisableAutoGenTag = true
	hdr := &doc.GenManHeader{Title: "VGPUCTL", Section: "1", Source: "vgpu", Manual: "vgpu manual"}
	if err := doc.GenManTree(root, hdr, dir); err != nil {
		return fmt.Errorf("write man pages to %s: %w", dir, err)
	}
	return nil
}
