package simkernel

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"syscall"

	simtools "github.com/vgpu-project/vgpu/internal/sim/tools"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// nvGPU is what the nvidia driver keeps for a PF it drives: its
// /proc/driver/nvidia/gpus/<bdf> directory and the unbind lock there.
type nvGPU struct {
	dir        *node
	unbindLock bool
	clients    int // NVML clients (nvidia-smi, DCGM) holding the GPU open
}

// nvidiaProcDir is where the nvidia driver lists its GPUs.
const nvidiaProcDir = "/proc/driver/nvidia/gpus"

// addNVProc is nv_procfs_add_gpu: unbindLock reads "1" once a write of 1
// took the lock, which the driver grants only while no client has the GPU
// open ("Cannot obtain unbindLock" in sriov-manage); 0 drops it.
func (k *Kernel) addNVProc(d *pciDev) {
	g := &nvGPU{dir: k.mkdir(k.mkdirAll(nvidiaProcDir), d.name)}
	if old := d.nvProc; old != nil {
		g.clients = old.clients // the clients are processes: they outlive a rebind
	}
	d.nvProc = g
	k.attr(g.dir, "unbindLock", func() string { return boolDigit(g.unbindLock) }, func(s string) syscall.Errno {
		v, e := kstrtoul(s, 32)
		if e != 0 {
			return syscall.EINVAL
		}
		g.unbindLock = v != 0 && g.clients == 0 && k.nvmlSessions() == 0
		return 0
	})
}

// removeNVProc is nv_procfs_remove_gpu, at the PF's unbind.
func (k *Kernel) removeNVProc(d *pciDev) {
	if d.nvProc == nil {
		return
	}
	k.detachNode(d.nvProc.dir)
	d.nvProc = &nvGPU{clients: d.nvProc.clients}
}

// SetNVMLClients makes n NVML clients hold the NVIDIA GPU at addr, as
// nvidia-smi or DCGM do while they run: the driver's unbind lock is
// refused until they are gone.
func (k *Kernel) SetNVMLClients(addr string, n int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.devs[addr]
	if d == nil || d.nvProc == nil {
		return fmt.Errorf("simkernel: %s is no GPU the nvidia driver has had", addr)
	}
	d.nvProc.clients = n
	if n > 0 {
		d.nvProc.unbindLock = false
	}
	return nil
}

// hasTool reports whether the host has tool installed: sriov-manage comes
// with the NVIDIA vGPU host driver only (the real H200 host's datacenter
// driver had none: docs/real-hosts.md).
func (k *Kernel) hasTool(tool string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return tool == sysfs.ToolModprobe || tool == sysfs.ToolSriovManage && k.drvByName[DrvNVIDIA] != nil && k.host.nvVGPUHost() ||
		tool == sysfs.ToolAMDSMI && k.ngim != nil
}

// RunTool implements sysfs.ToolRunner with the simulated tools
// (internal/sim/tools), acting on this kernel as the real ones act on /sys.
func (k *Kernel) RunTool(ctx context.Context, tool string, args ...string) ([]byte, error) {
	if !k.hasTool(tool) {
		return nil, fmt.Errorf("run %s: %w", tool, syscall.ENOENT)
	}
	var out []byte
	var code int
	switch tool {
	case sysfs.ToolModprobe:
		s, c := k.modprobe(args)
		out, code = []byte(s), c
	case sysfs.ToolAMDSMI:
		s, c := k.amdSMI(args)
		out, code = []byte(s), c
	default:
		var b bytes.Buffer
		code = simtools.Run(ctx, k, tool, args, &b)
		out = b.Bytes()
	}
	if code != 0 {
		return out, fmt.Errorf("%s %v: exit status %d: %s", tool, args, code, sysfs.LastLine(out))
	}
	return out, nil
}

// InstallTool puts tool at its install path in the tree as a symlink to
// target, an executable outside the tree (vgpusim's wrapper), so that a
// program reading the mount runs it as it would the real one. A host
// without the tool's driver gets none.
func (k *Kernel) InstallTool(tool, target string) bool {
	if !k.hasTool(tool) {
		return false
	}
	k.Link(sysfs.DefaultToolPaths()[tool], target)
	return true
}

// Link puts a symlink at p (absolute, in the tree) to target outside the
// tree, replacing what p held: how vgpusim hands out what a host has
// besides sysfs (a vendor tool, its NVML's socket).
func (k *Kernel) Link(p, target string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	dir, name := path.Split(p)
	n := k.newNode(name, kindLink, 0o777)
	n.target = target
	d := k.mkdirAll(dir)
	k.detachNode(d.children[name])
	k.attach(d, n)
}
