package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/durable"
	"github.com/vgpu-project/vgpu/internal/usage"
)

// hookName is the name of our script in libvirt's qemu.d directory.
const hookName = "vgpu"

// defaultHooksDir is libvirt's hook directory on Debian and most
// distributions (sysconfdir/libvirt/hooks).
const defaultHooksDir = "/etc/libvirt/hooks"

func newHookCmd(g *globals) *cobra.Command {
	var hooksDir, binary string
	cmd := &cobra.Command{
		Use:   "hook",
		Short: "Install or remove the libvirt hook that readies vGPUs at VM start",
		Long: `libvirt runs every executable in HOOKS_DIR/qemu.d/ for each QEMU domain it
prepares, starts, stops, migrates or restores. vgpu's is vgpu-hook, installed
as HOOKS_DIR/qemu.d/vgpu: it asks vgpud to make a domain's vGPUs ready before
QEMU starts and to release them after it stops, and lets every domain without
a vGPU request pass untouched.`,
		Args: usage.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().StringVar(&hooksDir, "hooks-dir", defaultHooksDir, "libvirt's hook directory")

	install := &cobra.Command{
		Use:   "install",
		Short: "Install vgpu-hook as HOOKS_DIR/qemu.d/vgpu",
		Long: `Copy the vgpu-hook binary (found next to vgpuctl, or given by --hook-binary) to
HOOKS_DIR/qemu.d/vgpu, mode 0755. The copy replaces an older one atomically:
libvirt never runs a half-written hook. libvirt looks for hooks when its daemon
starts, so restart virtqemud (or libvirtd) after the first install.`,
		Example: `  vgpuctl hook install
  vgpuctl hook install --hooks-dir /etc/libvirt/hooks --hook-binary ./bin/vgpu-hook`,
		Args: usage.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			src := binary
			if src == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("find vgpu-hook next to vgpuctl: %w; pass --hook-binary", err)
				}
				src = filepath.Join(filepath.Dir(exe), "vgpu-hook")
			}
			dst := filepath.Join(hooksDir, "qemu.d", hookName)
			changed, err := installHook(src, dst)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if !changed {
				_, err := fmt.Fprintf(w, "%s is up to date\n", dst)
				return err
			}
			_, err = fmt.Fprintf(w, "installed %s as %s\nrestart virtqemud (or libvirtd) if this is the first hook libvirt has: it looks for hooks when it starts\n", src, dst)
			return err
		},
	}
	install.Flags().StringVar(&binary, "hook-binary", "", "the vgpu-hook binary to install (default: vgpu-hook next to vgpuctl)")

	uninstall := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove HOOKS_DIR/qemu.d/vgpu",
		Long: `Remove the vgpu hook. Domains started afterwards get no vGPU made ready, and
domains running now keep theirs until vgpud releases them.`,
		Args: usage.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dst := filepath.Join(hooksDir, "qemu.d", hookName)
			err := os.Remove(dst)
			if errors.Is(err, fs.ErrNotExist) {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s is not installed; nothing to do\n", dst)
				return err
			}
			if err != nil {
				return fmt.Errorf("remove the hook %s: %w", dst, err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", dst)
			return err
		},
	}
	cmd.AddCommand(install, uninstall)
	return cmd
}

// installHook copies src to dst (mode 0755) unless dst has the same bytes
// already; it reports whether dst changed. The copy replaces dst
// atomically and durably (durable.WriteFile), so libvirt runs either the
// old hook or the new one, never a partial file.
func installHook(src, dst string) (changed bool, err error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return false, fmt.Errorf("read the hook binary %s: %w (pass --hook-binary)", src, err)
	}
	if fi, err := os.Stat(src); err == nil && fi.Mode()&0o111 == 0 {
		return false, fmt.Errorf("the hook binary %s is not executable", src)
	}
	if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, data) {
		if fi, err := os.Stat(dst); err == nil && fi.Mode().Perm() == 0o755 {
			return false, nil
		}
	}
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("create the hook directory %s: %w", dir, err)
	}
	// libvirt runs the hook as root, admins read it.
	if err := durable.WriteFile(dst, data, 0o755); err != nil {
		return false, fmt.Errorf("install the hook as %s: %w", dst, err)
	}
	return true, nil
}
