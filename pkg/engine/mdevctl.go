package engine

import (
	"fmt"

	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/mdevctl"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// checkMdevctl refuses cfg where it manages an mdev parent that mdevctl,
// per its definitions in dir, starts mdevs on by itself: each GPU an
// assignment selects (those in only, when not nil), with its VFs, and each
// virtual parent an entry names. dir "" checks nothing.
func checkMdevctl(f sysfs.FS, dir string, cfg *config.Config, as []config.Assignment, only map[string]bool) error {
	if dir == "" {
		return nil
	}
	file := cfg.Path
	if file == "" {
		file = "host config"
	}
	label := func(i int) string {
		field := fmt.Sprintf("gpus[%d]", i)
		if l := cfg.Line(field); l > 0 {
			return fmt.Sprintf("%s:%d: %s", file, l, field)
		}
		return file + ": " + field
	}
	var ts []mdevctl.Target
	for _, a := range as {
		if only == nil || only[a.GPU.String()] {
			ts = append(ts, mdevctl.Target{Target: vgpu.GPU(a.GPU), Label: label(a.Entry)})
		}
	}
	for i, e := range cfg.GPUs {
		if e.Parent != "" && (only == nil || only[e.Parent]) {
			ts = append(ts, mdevctl.Target{Target: vgpu.Parent(e.Parent), Label: label(i)})
		}
	}
	return mdevctl.Check(f, dir, ts)
}
