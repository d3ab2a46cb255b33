//go:build !cgo

package main

import (
	"fmt"

	"os"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/pkg/attach"
	"github.com/vgpu-project/vgpu/pkg/engine"
)

// withDomain hands the whole command over to vgpuctl's cgo build, which links
// libvirt: this build does not, so that the commands that never talk to
// libvirt start as a static binary (docs/libvirt.md, "Who loads libvirt").
// The arguments were checked here already; the helper checks them again.
func (g *globals) withDomain(*domainFlags, string, func(attach.Domain) error) error {
	return execLibvirtHelper()
}

// migrate is vgpuctl-libvirt's too.
func (g *globals) migrate(*cobra.Command, migrateOpts) error { return execLibvirtHelper() }

// knownDomains: recover-ledger runs in vgpuctl-libvirt too.
func (g *globals) knownDomains(uri string) ([]engine.KnownDomain, error) {
	if g.listDomains != nil {
		return g.listDomains(uri)
	}
	return nil, execLibvirtHelper()
}

// execLibvirtHelper replaces this process by vgpuctl-libvirt, same argv.
func execLibvirtHelper() error {
	path, err := libvirtHelper()
	if err != nil {
		return err
	}
	if err := syscall.Exec(path, append([]string{path}, os.Args[1:]...), os.Environ()); err != nil {
		return fmt.Errorf("run %s, vgpuctl's libvirt build: %w", path, err)
	}
	return nil // not reached: Exec returns only on failure
}

// writeMan: vgpuctl-libvirt renders the man pages (man_cgo.go).
func writeMan(*cobra.Command, string) error { return execLibvirtHelper() }
