package sysfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// Vendor tools vgpu runs, by name, and where the vendor installs them.
const (
	// ToolSriovManage enables and disables an NVIDIA GPU's VFs: the only
	// way NVIDIA supports (AI Enterprise 5 user guide §2.8.2).
	ToolSriovManage = "sriov-manage"
	// ToolModprobe loads and unloads kernel modules: old AMD GIM takes
	// its VF count only when it loads.
	ToolModprobe = "modprobe"
	// ToolAMDSMI is the host amd-smi of new AMD GIM (MI300X and later):
	// the driver's VF count changes only through it (set --num-vf).
	ToolAMDSMI = "amd-smi"
)

// DefaultToolPaths are the tools' install paths on a host.
func DefaultToolPaths() map[string]string {
	return map[string]string{ToolSriovManage: "/usr/lib/nvidia/sriov-manage", ToolModprobe: "/usr/sbin/modprobe",
		ToolAMDSMI: "/usr/bin/amd-smi"}
}

// ErrNoTool: the FS has no way to run a vendor tool.
var ErrNoTool = errors.New("no vendor tool runner")

// ToolRunner is an FS that can run a vendor's host tool against the kernel
// it shows: the real tool on a real host, the simulated one on the fake
// kernel, so that its sysfs writes land where vgpu reads.
type ToolRunner interface {
	// RunTool runs tool with args and returns what it printed (stdout and
	// stderr). A non-zero exit is an error holding the tool's last line.
	RunTool(ctx context.Context, tool string, args ...string) ([]byte, error)
}

// RunTool runs tool through f, or fails with ErrNoTool.
func RunTool(ctx context.Context, f FS, tool string, args ...string) ([]byte, error) {
	r, ok := f.(ToolRunner)
	if !ok {
		return nil, fmt.Errorf("run %s %s: %w on this host view", tool, strings.Join(args, " "), ErrNoTool)
	}
	return r.RunTool(ctx, tool, args...)
}

// toolPath is where o finds tool: the path set in Tools, else the vendor's
// install path under Root (a simulated host carries its own tools).
func (o OS) toolPath(tool string) (string, error) {
	if p := o.Tools[tool]; p != "" {
		return p, nil
	}
	def, ok := DefaultToolPaths()[tool]
	if !ok {
		return "", fmt.Errorf("run %s: unknown vendor tool: %w", tool, ErrNoTool)
	}
	return filepath.Join(o.Root, def), nil
}

// RunTool implements ToolRunner by executing the tool.
func (o OS) RunTool(ctx context.Context, tool string, args ...string) ([]byte, error) {
	p, err := o.toolPath(tool)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, p, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		line := LastLine(out.Bytes())
		if line == "" {
			return out.Bytes(), fmt.Errorf("%s %s: %w", p, strings.Join(args, " "), err)
		}
		return out.Bytes(), fmt.Errorf("%s %s: %w: %s", p, strings.Join(args, " "), err, line)
	}
	return out.Bytes(), nil
}

// LastLine is the last non-empty line of a tool's output, the one that
// usually says why it failed.
func LastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
