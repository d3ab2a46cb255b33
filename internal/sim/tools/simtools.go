package simtools

import (
	"context"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Run runs tool with args against f, printing to out; it returns the
// tool's exit code (127 for a tool the simulated host does not have).
func Run(ctx context.Context, f sysfs.FS, tool string, args []string, out io.Writer) int {
	switch tool {
	case sysfs.ToolSriovManage:
		return SriovManage(ctx, f, args, out)
	}
	fmt.Fprintf(out, "%s: command not found\n", tool)
	return 127
}

// SriovManage is NVIDIA's /usr/lib/nvidia/sriov-manage <-e|-d> <ssss:bb:dd.f>
// (the vGPU host driver's script; docs/vendors/nvidia.md, "VFs: only
// through sriov-manage"):
//
//   - -e enables every VF the GPU has (sriov_totalvfs), and -d disables
//     them; a GPU that already has (or lacks) VFs is left alone, exit 0.
//   - The nvidia driver has no sriov_configure, so the script moves the PF
//     to pci-pf-stub for the sriov_numvfs write: take the driver's
//     unbindLock (refused while an NVML client holds the GPU: "Cannot
//     obtain unbindLock for ..."), unbind, new_id + bind pci-pf-stub,
//     write sriov_numvfs, unbind pci-pf-stub, remove_id, bind nvidia.
//   - -e then binds every VF to nvidia; -d first unbinds the VFs from
//     vfio-pci and nvidia.
//   - A GPU without SR-IOV is skipped with exit 0, as the script does.
//   - The script has no "set -e" and ignores set_numvfs's status: a
//     refused unbindLock or a failed write is printed and the exit code is
//     still 0. Callers must read sriov_numvfs to learn what happened.
func SriovManage(_ context.Context, f sysfs.FS, args []string, out io.Writer) int {
	if len(args) != 2 || (args[0] != "-e" && args[0] != "-d") {
		fmt.Fprintln(out, "Usage:\n    /usr/lib/nvidia/sriov-manage <-e|-d> <ssss:bb:dd.f|ALL>")
		return 1
	}
	s := &sriovManage{f: f, out: out, gpu: strings.ToLower(args[1])}
	dev := sysfs.PCIDevices + "/" + s.gpu
	if _, err := f.Stat(dev); err != nil {
		return 1 // sanitize_gpu_sbdf: lspci finds nothing, exit 1
	}
	if _, err := f.Stat(dev + "/sriov_numvfs"); err != nil {
		return 0 // device_has_sriov || exit 0
	}
	if _, err := f.Stat(sysfs.PCIDrivers + "/pci-pf-stub"); err != nil {
		fmt.Fprintln(out, "modprobe: FATAL: Module pci-pf-stub not found.")
		return 1
	}
	n, err := s.readInt(dev + "/sriov_numvfs")
	if err != nil {
		return s.fail(err)
	}
	if args[0] == "-e" {
		if n != 0 {
			fmt.Fprintf(out, "GPU at %s already has VFs enabled.\n", s.gpu)
			return 0
		}
		fmt.Fprintf(out, "Enabling VFs on %s\n", s.gpu)
		total, err := s.readInt(dev + "/sriov_totalvfs")
		if err != nil {
			return s.fail(err)
		}
		s.setNumVFs(total)
		vfs, err := s.vfs()
		if err != nil {
			return s.fail(err)
		}
		for _, vf := range vfs {
			if s.driver(vf) == "nvidia" {
				continue
			}
			if s.driver(vf) != "" {
				_ = f.WriteFile(sysfs.PCIDevices+"/"+vf+"/driver/unbind", []byte(vf))
			}
			_ = f.WriteFile(sysfs.PCIDrivers+"/nvidia/bind", []byte(vf))
		}
		return 0
	}
	if n == 0 {
		fmt.Fprintf(out, "GPU at %s already has VFs disabled.\n", s.gpu)
		return 0
	}
	fmt.Fprintf(out, "Disabling VFs on %s\n", s.gpu)
	vfs, err := s.vfs()
	if err != nil {
		return s.fail(err)
	}
	for _, vf := range vfs {
		for _, drv := range []string{"vfio-pci", "nvidia"} {
			if s.driver(vf) == drv {
				_ = f.WriteFile(sysfs.PCIDrivers+"/"+drv+"/unbind", []byte(vf))
			}
		}
	}
	s.setNumVFs(0)
	return 0
}

type sriovManage struct {
	f   sysfs.FS
	out io.Writer
	gpu string
}

// fail reports a read the script needs and could not make.
func (s *sriovManage) fail(err error) int {
	fmt.Fprintln(s.out, err)
	return 1
}

func (s *sriovManage) readInt(p string) (int, error) {
	b, err := s.f.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func (s *sriovManage) driver(dev string) string {
	t, err := s.f.Readlink(sysfs.PCIDevices + "/" + dev + "/driver")
	if err != nil {
		return ""
	}
	return path.Base(t)
}

// vfs lists the GPU's VFs by their virtfn links, in index order.
func (s *sriovManage) vfs() ([]string, error) {
	ents, err := s.f.ReadDir(sysfs.PCIDevices + "/" + s.gpu)
	if err != nil {
		return nil, err
	}
	type vf struct {
		i    int
		name string
	}
	var vfs []vf
	for _, e := range ents {
		i, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "virtfn"))
		if !strings.HasPrefix(e.Name(), "virtfn") || err != nil {
			continue
		}
		t, err := s.f.Readlink(sysfs.PCIDevices + "/" + s.gpu + "/" + e.Name())
		if err != nil {
			return nil, err
		}
		vfs = append(vfs, vf{i, path.Base(t)})
	}
	sort.Slice(vfs, func(a, b int) bool { return vfs[a].i < vfs[b].i })
	out := make([]string, len(vfs))
	for i, v := range vfs {
		out[i] = v.name
	}
	return out, nil
}

// setNumVFs is the script's set_numvfs: the write happens with the PF on
// pci-pf-stub, since nvidia has no sriov_configure. Failures are printed
// as bash prints them; the caller goes on regardless, as the script does.
func (s *sriovManage) setNumVFs(n int) {
	f, gpu := s.f, s.gpu
	dev := sysfs.PCIDevices + "/" + gpu
	echo := func(p, v string) {
		if err := f.WriteFile(p, []byte(v)); err != nil {
			fmt.Fprintf(s.out, "/usr/lib/nvidia/sriov-manage: line 1: echo: write error: %v\n", sysfs.Errno(err))
		}
	}
	if drv := s.driver(gpu); drv != "" {
		if drv == "nvidia" {
			lock := "/proc/driver/nvidia/gpus/" + gpu + "/unbindLock"
			got := -1
			if _, err := f.Stat(lock); err == nil {
				echo(lock, "1\n")
				got, _ = s.readInt(lock)
			}
			if got != 1 {
				fmt.Fprintf(s.out, "Cannot obtain unbindLock for %s\n", gpu)
				return
			}
		}
		echo(sysfs.PCIDrivers+"/"+drv+"/unbind", gpu)
	}
	ids, err := s.ids(dev)
	if err != nil {
		fmt.Fprintln(s.out, err)
		return
	}
	stub := sysfs.PCIDrivers + "/pci-pf-stub"
	echo(stub+"/new_id", ids)
	if s.driver(gpu) != "pci-pf-stub" {
		echo(stub+"/bind", gpu)
	}
	echo(dev+"/sriov_numvfs", strconv.Itoa(n))
	echo(stub+"/unbind", gpu)
	echo(stub+"/remove_id", ids)
	echo(sysfs.PCIDrivers+"/nvidia/bind", gpu)
}

// ids is "vendor device" as lspci -n prints them, for new_id.
func (s *sriovManage) ids(dev string) (string, error) {
	v, err := s.f.ReadFile(dev + "/vendor")
	if err != nil {
		return "", err
	}
	d, err := s.f.ReadFile(dev + "/device")
	if err != nil {
		return "", err
	}
	trim := func(b []byte) string { return strings.TrimPrefix(strings.TrimSpace(string(b)), "0x") }
	return trim(v) + " " + trim(d), nil
}
