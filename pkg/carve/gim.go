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

// Old AMD GIM (GPUOpen MxGPU-Virtualization, the S7150) enables SR-IOV
// itself when it loads, on every GPU it drives, with one VF count: its
// vf_num parameter, else /etc/gim_config, which it rewrites from the
// parameters it got. Its PFs have no driver link and no sriov_configure,
// so sriov_numvfs answers ENOENT; the count changes only by reloading the
// module (docs/vendors/amd.md, VENDORS.md §4).

// ErrGIMShared: a GIM reload would re-create the VFs of another GPU that
// vgpu has handed out.
var ErrGIMShared = errors.New("old GIM gives every GPU it drives the same VF count")

// gimModule is where a loaded gim shows.
const gimModule = sysfs.Modules + "/gim"

// byGIM: g's VFs come from old GIM, whose id table (gim_pci_tbl) holds
// the S7150 alone.
func byGIM(g inventory.GPU) bool {
	return g.VendorID == inventory.VendorAMD && g.DeviceID == 0x6929
}

// gimLoaded reports whether the gim module is in the kernel.
func (c *Carver) gimLoaded() (bool, error) {
	_, err := c.fs.Stat(gimModule)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
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

// checkGIMSiblings refuses a GIM reload for gpu while another GIM GPU has
// VFs on vfio-pci: the reload would give them a new count and leave them
// on pci-stub behind vgpu's back.
func (c *Carver) checkGIMSiblings(gpu pci.Address, n int) error {
	pfs, err := c.gimPFs()
	if err != nil {
		return fmt.Errorf("list the GPUs gim drives: %w", err)
	}
	for _, pf := range pfs {
		if pf == gpu {
			continue
		}
		vfs, err := sriov.VFs(c.fs, pf)
		if err != nil {
			return fmt.Errorf("list the VFs of %s: %w", pf, err)
		}
		used := 0
		for _, vf := range vfs {
			if d, err := pci.CurrentDriver(c.fs, vf.Address); err != nil {
				return err
			} else if d == vfioPCI {
				used++
			}
		}
		if used > 0 {
			return fmt.Errorf("carve %s to %d VFs: %w (vf_num): reloading gim would re-create the %d VFs of %s, which has %d on vfio-pci; uncarve %s first, then carve every GIM GPU to the same split",
				gpu, n, ErrGIMShared, len(vfs), pf, used, pf)
		}
	}
	return nil
}

// gimReload makes gim enable o.Count VFs per GPU: modprobe -r gim (when
// loaded), then modprobe gim vf_num=N, judged by the PF's sriov_numvfs.
// GIM saves vf_num to /etc/gim_config, so the count holds across reboots.
// With o.Autoprobe set, the PF's sriov_drivers_autoprobe has that value
// while the VFs appear (off for VFs bound for vfio-pci: neither amdgpu,
// where it is not blacklisted, nor pci-stub probes them first).
func (c *Carver) gimReload(ctx context.Context, o Op) (err error) {
	pf, n := o.Device, o.Count
	loaded, err := c.gimLoaded()
	if err != nil {
		return fmt.Errorf("reload gim for %s: %w", pf, err)
	}
	if loaded {
		if cur, err := sriov.NumVFs(c.fs, pf); err != nil || cur == n {
			return err
		}
	}
	if o.Autoprobe != nil {
		was, aerr := sriov.Autoprobe(c.fs, pf)
		if aerr != nil {
			return aerr
		}
		if was != *o.Autoprobe {
			if aerr := sriov.SetAutoprobe(c.fs, pf, *o.Autoprobe); aerr != nil {
				return aerr
			}
			defer func() { err = errors.Join(err, sriov.SetAutoprobe(c.fs, pf, was)) }()
		}
	}
	if loaded {
		if out, err := sysfs.RunTool(ctx, c.fs, sysfs.ToolModprobe, "-r", "gim"); err != nil {
			return c.toolError(fmt.Sprintf("unload gim to change the VF count of %s", pf), out, err)
		}
	}
	arg := fmt.Sprintf("vf_num=%d", n)
	if out, err := sysfs.RunTool(ctx, c.fs, sysfs.ToolModprobe, "gim", arg); err != nil {
		return c.toolError(fmt.Sprintf("load gim with %s for %s", arg, pf), out, err)
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

// toolError is a vendor tool's failure in one line, with a hint when the
// tool is missing.
func (c *Carver) toolError(what string, out []byte, err error) error {
	switch {
	case errors.Is(err, sysfs.ErrNoTool):
		return fmt.Errorf("%s: %w", what, err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %w: %w (install kmod)", what, ErrVendorTool, err)
	}
	return fmt.Errorf("%s: %w: %w", what, ErrVendorTool, err)
}
