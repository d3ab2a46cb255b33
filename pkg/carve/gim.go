package carve

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Old AMD GIM (GPUOpen MxGPU-Virtualization, the S7150) enables SR-IOV
// itself when it loads, on every GPU it drives, with one VF count: its
// vf_num parameter, else /etc/gim_config, which it rewrites from the
// parameters it got. Its PFs have no driver link and no sriov_configure,
// so sriov_numvfs answers ENOENT; the count changes only by reloading the
// module (docs/vendors/amd.md).

// ErrGIMShared: a GIM reload would re-create the VFs of another GPU that
// vgpu has handed out.
var ErrGIMShared = errors.New("old GIM gives every GPU it drives the same VF count")

// byGIM: g's VFs come from old GIM.
func byGIM(g inventory.GPU) bool { return inventory.IsGIM(g.VendorID, g.DeviceID) }

// schedParams are the module parameters besides vf_num that every reload
// passes: the scheduler, so that the file GIM saves agrees.
func schedParams(option, intervalMS int) []string {
	return []string{fmt.Sprintf("sched_option=%d", option), fmt.Sprintf("sched_interval=%d", intervalMS)}
}

// gimParams are schedParams for the scheduler of o (nil: GIM's defaults).
func gimParams(o *profile.GIMOptions) []string { return schedParams(o.SchedOption(), o.Interval()) }

// stateParams are schedParams for what gim runs with now.
func stateParams(s *inventory.GIMState) []string {
	return schedParams(s.SchedOption, s.SchedIntervalMS)
}

// gimRuns reports whether gim runs with n VFs and the scheduler of o.
func gimRuns(s *inventory.GIMState, cur, n int, o *profile.GIMOptions) bool {
	return s != nil && cur == n && slices.Equal(stateParams(s), gimParams(o))
}

// planGIM completes a sriov plan for old GIM: a reload also when the VF
// count is right but the scheduler is not, and the scheduler on the reload.
func planGIM(g inventory.GPU, p profile.Plan, ops []Op) []Op {
	i := slices.IndexFunc(ops, func(o Op) bool { return o.Kind == OpGIMReload })
	if i < 0 {
		cur := 0
		if g.SRIOV != nil {
			cur = g.SRIOV.NumVFs
		}
		if gimRuns(g.GIM, cur, p.NumVFs, p.GIM) {
			return ops
		}
		if g.SRIOV != nil {
			ops = append(ops, disableVFs(g)...) // the VFs to unbind first
		}
		ops = append(ops, Op{Kind: OpGIMReload, Device: g.Address, Count: p.NumVFs, Destroys: "the VFs of every GPU gim drives"})
		i = len(ops) - 1
	}
	ops[i].Params = gimParams(p.GIM)
	return ops
}

// gimPFs lists the PFs old GIM drives (by its id table, loaded or not).
func (c *Carver) gimPFs() ([]pci.Address, error) {
	names, err := sysfs.Names(c.fs, sysfs.PCIDevices)
	if err != nil {
		return nil, err
	}
	var out []pci.Address
	for _, name := range names {
		a, err := pci.ParseAddress(name)
		if err != nil {
			continue
		}
		v, d, _, err := pci.ReadIDs(c.fs, a)
		if err != nil {
			return nil, err
		}
		if byGIM(inventory.GPU{VendorID: v, DeviceID: d}) {
			if _, isVF, err := sriov.PhysFn(c.fs, a); err != nil || isVF {
				continue
			}
			out = append(out, a)
		}
	}
	return out, nil
}

// gimSiblings returns the ops that take the other GIM GPUs' VFs off
// vfio-pci before a reload for gpu, whose VFs gim is about to re-create:
// with take false, it refuses instead while any has VFs there (the reload
// would give them a new count behind vgpu's back).
func (c *Carver) gimSiblings(gpu pci.Address, n int, take bool) ([]Op, error) {
	pfs, err := c.gimPFs()
	if err != nil {
		return nil, fmt.Errorf("list the GPUs gim drives: %w", err)
	}
	var ops []Op
	for _, pf := range pfs {
		if pf == gpu {
			continue
		}
		vfs, err := sriov.VFs(c.fs, pf)
		if err != nil {
			return nil, fmt.Errorf("list the VFs of %s: %w", pf, err)
		}
		var used []Op
		for _, vf := range vfs {
			if d, err := pci.CurrentDriver(c.fs, vf.Address); err != nil {
				return nil, err
			} else if d == vfioPCI {
				used = append(used, Op{Kind: OpDriver, Device: vf.Address, To: "", Destroys: vf.Address.String()})
			}
		}
		if len(used) > 0 && !take {
			return nil, fmt.Errorf("carve %s to %d VFs: %w (vf_num): reloading gim would re-create the %d VFs of %s, which has %d on vfio-pci; uncarve %s first, then carve every GIM GPU to the same split (a host config that gives them one profile does this itself)",
				gpu, n, ErrGIMShared, len(vfs), pf, len(used), pf)
		}
		ops = append(ops, used...)
	}
	return ops, nil
}

// gimReload makes gim enable o.Count VFs per GPU: modprobe -r gim (when
// loaded), then modprobe gim vf_num=N, judged by the PF's sriov_numvfs.
// GIM saves vf_num to /etc/gim_config, so the count holds across reboots.
// With o.Autoprobe set, the PF's sriov_drivers_autoprobe has that value
// while the VFs appear (off for VFs bound for vfio-pci: neither amdgpu,
// where it is not blacklisted, nor pci-stub probes them first).
func (c *Carver) gimReload(ctx context.Context, o Op) error {
	pf, n := o.Device, o.Count
	state, err := inventory.ReadGIM(c.fs)
	if err != nil {
		return fmt.Errorf("reload gim for %s: %w", pf, err)
	}
	if state != nil {
		cur, err := sriov.NumVFs(c.fs, pf)
		if err != nil || cur == n && (o.Params == nil || slices.Equal(o.Params, stateParams(state))) {
			return err
		}
	}
	arg := fmt.Sprintf("vf_num=%d", n)
	args := append([]string{"gim", arg}, o.Params...)
	err = c.withAutoprobe(pf, o.Autoprobe, func() error {
		if state != nil {
			if _, err := sysfs.RunTool(ctx, c.fs, sysfs.ToolModprobe, "-r", "gim"); err != nil {
				return toolError(fmt.Sprintf("unload gim to change the VF count of %s", pf), err)
			}
		}
		if _, err := sysfs.RunTool(ctx, c.fs, sysfs.ToolModprobe, args...); err != nil {
			return toolError(fmt.Sprintf("load gim with %s for %s", arg, pf), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	got, err := sriov.NumVFs(c.fs, pf)
	if err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("load gim with %s for %s: %w: the GPU has %d VFs (its own VF limit caps vf_num)",
			arg, pf, ErrVendorTool, got)
	}
	return nil
}

// toolError is modprobe's failure in one line, with a hint when the tool
// is missing or this process may not load modules.
func toolError(what string, err error) error {
	switch {
	case errors.Is(err, sysfs.ErrNoTool):
		return fmt.Errorf("%s: %w", what, err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %w: %w (install kmod)", what, ErrVendorTool, err)
	}
	status, _ := os.ReadFile("/proc/self/status")
	return fmt.Errorf("%s: %w: %w%s", what, ErrVendorTool, err, moduleHint(string(status)))
}

// ModuleLoadHint is why this process could not reload gim, "" when it
// can: read once at start, it lets vgpud warn before any carve needs it.
func ModuleLoadHint() string {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.Trim(moduleHint(string(status)), " ()"))
}

// capSysModule is CAP_SYS_MODULE's bit in the Cap* masks of /proc/PID/status.
const capSysModule = 16

// moduleHint explains a refused modprobe when status (this process's
// /proc/self/status) shows no CAP_SYS_MODULE: vgpud's unit drops it unless
// the GIM drop-in is installed.
func moduleHint(status string) string {
	for _, line := range strings.Split(status, "\n") {
		v, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		if m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && m&(1<<capSysModule) == 0 {
			return " (this process lacks CAP_SYS_MODULE: under systemd, install the vgpud-gim.conf drop-in, docs/vendors/amd.md)"
		}
	}
	return ""
}
