package carve

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// New AMD GIM (amd/MxGPU-Virtualization: MI300X, MI350X, Radeon PRO V710)
// binds the PF and enables SR-IOV itself at probe, with its vf_num for
// that GPU. It has no sriov_configure (sriov_numvfs answers ENOENT); the
// count changes at run time only with amd-smi set --num-vf, which the
// driver refuses while a VF is in use and carries out by disabling and
// re-enabling SR-IOV; the accelerator partition follows the count. The
// count is per GPU, and GIM does not save it: after a reboot vgpud sets
// it again (docs/vendors/amd.md).

// byNewGIM: g's VFs come from new GIM.
func byNewGIM(g inventory.GPU) bool { return inventory.IsNewGIM(g.VendorID, g.DeviceID) }

// keepsOwnVFs: g's driver keeps its VFs while loaded, so an uncarve only
// unbinds them (old and new GIM).
func keepsOwnVFs(g inventory.GPU) bool { return byGIM(g) || byNewGIM(g) }

// amdSMINumVF makes new GIM give pf o.Count VFs: amd-smi set --gpu=PF
// --num-vf=N, judged by sriov_numvfs, since amd-smi prints its errors and
// still exits 0. With o.Autoprobe set, the PF's sriov_drivers_autoprobe
// has that value while the VFs appear.
func (c *Carver) amdSMINumVF(ctx context.Context, o Op) error {
	pf, n := o.Device, o.Count
	cur, err := sriov.NumVFs(c.fs, pf)
	if err != nil || cur == n {
		return err
	}
	what := fmt.Sprintf("set the VF count of %s to %d with amd-smi set --num-vf", pf, n)
	var out []byte
	err = c.withAutoprobe(pf, o.Autoprobe, func() error {
		var err error
		out, err = sysfs.RunTool(ctx, c.fs, sysfs.ToolAMDSMI, "set", "--gpu="+pf.String(), fmt.Sprintf("--num-vf=%d", n))
		return err
	})
	switch {
	case errors.Is(err, sysfs.ErrNoTool):
		return fmt.Errorf("%s: %w", what, err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %w: %w (amd-smi comes with GIM's smi-lib; give its path with --amd-smi)", what, ErrVendorTool, err)
	case err != nil:
		return fmt.Errorf("%s: %w: %w", what, ErrVendorTool, err)
	}
	got, err := sriov.NumVFs(c.fs, pf)
	if err != nil || got == n {
		return err
	}
	why := fmt.Sprintf("the GPU has %d VFs", got)
	if line := sysfs.LastLine(out); line != "" {
		why += "; amd-smi said: " + line
	}
	return fmt.Errorf("%s: %w: %s", what, ErrVendorTool, why)
}

// amdSMIInverse is the undo of an amd-smi VF count change: the count pf
// has now, and the autoprobe setting the op changes.
func (c *Carver) amdSMIInverse(o Op) ([]Op, error) {
	n, err := sriov.NumVFs(c.fs, o.Device)
	if err != nil {
		return nil, err
	}
	return c.autoprobeUndo(o, Op{Kind: OpAMDSMINumVF, Device: o.Device, Count: n})
}

// newGIMOp is the op that gives pf n VFs.
func newGIMOp(pf pci.Address, n int) Op {
	return Op{Kind: OpAMDSMINumVF, Device: pf, Count: n, Destroys: "the VFs of " + pf.String()}
}
