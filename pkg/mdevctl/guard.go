package mdevctl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// ErrAutostart: mdevctl starts mdevs on a parent that a vgpud change
// would manage too. The two would fight: each boot mdevctl starts its
// definitions when the parent appears, and vgpud's carve removes what its
// profile does not make, or cannot make its own where they stand.
var ErrAutostart = errors.New("mdevctl starts mdevs there")

// Target is what a vgpud change would manage: a GPU with every VF it can
// have (an A100's mdevs sit on its VFs), or a virtual mdev parent by name.
type Target struct {
	vgpu.Target
	// Label says where it comes from, for messages: a config entry
	// ("/etc/vgpud/config.yaml:4: gpus[0]"); "" for a carve.
	Label string
}

// ConflictError is one parent of a Target that mdevctl fills itself.
type ConflictError struct {
	Target Target
	Dir    string
	// Parent is the directory of the definitions: the GPU, one of its VFs
	// (VF is its index; -1 otherwise), or the virtual parent.
	Parent string
	VF     int
	// Auto are the UUIDs mdevctl starts; Broken the files there mdevctl
	// cannot read, which make every start-parent-mdevs fail: whether it
	// would start more is unknown.
	Auto   []string
	Broken []string
}

func (e *ConflictError) Error() string {
	var b strings.Builder
	if e.Target.Label != "" {
		b.WriteString(e.Target.Label + ": ")
	}
	where := e.Parent
	if e.VF >= 0 {
		where = fmt.Sprintf("%s (VF %d of %s)", e.Parent, e.VF, e.Target.GPU)
	}
	dir := e.Dir + "/" + e.Parent
	if len(e.Auto) > 0 {
		fmt.Fprintf(&b, "mdevctl starts mdevs on %s when it appears (start auto in %s: %s)", where, dir, strings.Join(e.Auto, ", "))
	} else {
		fmt.Fprintf(&b, "mdevctl may start mdevs on %s when it appears", where)
	}
	if len(e.Broken) > 0 {
		fmt.Fprintf(&b, ", and cannot read %s: mend or remove it", strings.Join(e.Broken, ", "))
	}
	fmt.Fprintf(&b, "; vgpud shares no mdev parent with mdevctl: move %s to vgpud (vgpuctl import mdevctl --parent %s prints its config; then mdevctl modify -u UUID --manual, or undefine, for each) or leave it to mdevctl",
		e.Target, e.Target)
	return b.String()
}

// Unwrap lets errors.Is find ErrAutostart.
func (e *ConflictError) Unwrap() error { return ErrAutostart }

// Check refuses the targets that mdevctl starts mdevs on: one
// *ConflictError per parent with definitions of start auto (or files
// mdevctl cannot read) in dir, joined. A target's parents are the GPU and
// every VF it can have (sriov.VFAddresses), enabled or not: sriov-manage
// enables them all, and udev has mdevctl fill each as it appears. dir ""
// checks nothing (an in-process fake kernel has no mdevctl).
func Check(f sysfs.FS, dir string, targets []Target) error {
	if dir == "" || len(targets) == 0 {
		return nil
	}
	defs, bad, err := Read(dir)
	if err != nil {
		return err
	}
	auto := map[string][]string{}
	for _, d := range defs {
		if d.Auto() {
			auto[d.Parent] = append(auto[d.Parent], d.UUID)
		}
	}
	broken := map[string][]string{}
	for _, b := range bad {
		broken[b.Parent] = append(broken[b.Parent], b.Path)
	}
	if len(auto) == 0 && len(broken) == 0 {
		return nil // the common host: no sysfs walk
	}
	var errs []error
	for _, t := range targets {
		parents := []string{t.Parent}
		if t.Parent == "" {
			var err error
			if parents, err = gpuParents(f, t.GPU); err != nil {
				return err
			}
		}
		for i, p := range parents {
			if len(auto[p]) == 0 && len(broken[p]) == 0 {
				continue
			}
			vf := i - 1
			if t.Parent != "" {
				vf = -1
			}
			errs = append(errs, &ConflictError{Target: t, Dir: dir, Parent: p, VF: vf, Auto: auto[p], Broken: broken[p]})
		}
	}
	return errors.Join(errs...)
}

// gpuParents names the GPU, then VF n at [n+1].
func gpuParents(f sysfs.FS, gpu pci.Address) ([]string, error) {
	out := []string{gpu.String()}
	vfs, _, err := sriov.VFAddresses(f, gpu)
	switch {
	case errors.Is(err, sriov.ErrNotPF), errors.Is(err, pci.ErrNoDevice):
		return out, nil
	case err != nil:
		return nil, fmt.Errorf("check mdevctl definitions on the VFs of %s: %w", gpu, err)
	}
	for _, a := range vfs {
		out = append(out, a.String())
	}
	return out, nil
}
