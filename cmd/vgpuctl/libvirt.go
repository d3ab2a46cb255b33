package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// libvirtHelperEnv overrides where a CGO_ENABLED=0 vgpuctl finds its libvirt build.
const libvirtHelperEnv = "VGPUCTL_LIBVIRT"

// libvirtHelper finds vgpuctl-libvirt, the cgo build of vgpuctl that attach
// and detach need: $VGPUCTL_LIBVIRT, else next to this binary (a build tree's
// bin/), else ../libexec/vgpu/ beside it (make install).
func libvirtHelper() (string, error) {
	if p := os.Getenv(libvirtHelperEnv); p != "" {
		return p, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find vgpuctl-libvirt: locate this executable: %w", err)
	}
	if r, err := filepath.EvalSymlinks(self); err == nil {
		self = r
	}
	dir := filepath.Dir(self)
	tried := []string{
		filepath.Join(dir, "vgpuctl-libvirt"),
		filepath.Join(dir, "..", "libexec", "vgpu", "vgpuctl-libvirt"),
	}
	for _, p := range tried {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("find vgpuctl-libvirt at %s: %w", p, err)
		}
	}
	return "", fmt.Errorf("attach, detach, migrate, recover-ledger and man run in vgpuctl-libvirt, vgpuctl's libvirt build, and it is in none of %s, %s (reinstall vgpu, or set %s)", tried[0], tried[1], libvirtHelperEnv)
}
