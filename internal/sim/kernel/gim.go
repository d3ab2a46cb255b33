package simkernel

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Old GIM (GPUOpen-LibrariesAndSDKs/MxGPU-Virtualization drv/, whose id
// table holds the S7150 alone), as its source behaves:
//
//   - gim_init reads /etc/gim_config (init_config), lets module parameters
//     that validate override it, and writes every option back to the file
//     (save_config: O_CREAT|O_RDWR without O_TRUNC, so a shorter content
//     leaves the old tail behind).
//   - It finds its GPUs itself (enumerate_all_pfs: pci_get_device over its
//     id table) and calls gim_probe on each; the pci_driver it registers has
//     a NULL id_table, so the driver core binds it to nothing: the PFs show
//     no driver link, and sriov_numvfs answers ENOENT ("no driver bound").
//   - Each adapter gets pci_enable_sriov(vf_num), where 0 or more than
//     TotalVFs means TotalVFs (enable_sriov in gim_interface.c).
//   - gim_exit (rmmod) disables SR-IOV on every adapter.

// gimConfigPath is GIM_CONFIG_PATH (drv/gim_command.h).
const gimConfigPath = "/etc/gim_config"

// gimOption is one entry of config_options (drv/gim_config.c), with its
// bounds from drv/gim_command.h; every default there is 0.
type gimOption struct {
	name     string
	value    int
	min, max int
}

// gimOptions is config_options in its order, which is the file's.
func gimOptions() []gimOption {
	return []gimOption{
		{name: "fb_option", min: 0, max: 1},
		{name: "sched_option", min: 0, max: 2},
		{name: "vf_num", min: 0, max: 16},
		{name: "pf_fb", min: 0, max: 65536},
		{name: "vf_fb", min: 0, max: 65536},
		{name: "sched_interval", min: 0, max: 2000},
		{name: "sched_interval_us", min: 0, max: 999},
		{name: "fb_clear", min: 0, max: 1},
	}
}

// gimState is the loaded module: its parameters (-1 when not given, as
// COMMAND_LINE_OPTION_DEFAULT) and the adapters it enabled SR-IOV on.
type gimState struct {
	params   map[string]int
	options  []gimOption
	adapters []*pciDev
	modDir   *node
}

// isGIMDevice: d is in gim_pci_tbl, which holds only the S7150.
func isGIMDevice(d *pciDev) bool {
	return d.ids.vendor == 0x1002 && d.ids.device == 0x6929 && !d.isVF()
}

// gimInit is gim_init with the parameters modprobe passed. k.mu is held.
func (k *Kernel) gimInit(params map[string]int) {
	g := &gimState{params: map[string]int{}, options: gimOptions()}
	for _, o := range g.options {
		g.params[o.name] = -1
	}
	g.parseConfig(k.etcFile(gimConfigPath))
	for i := range g.options {
		o := &g.options[i]
		if v, ok := params[o.name]; ok {
			g.params[o.name] = v
			if v >= o.min && v <= o.max {
				o.value = v
			}
		}
	}
	k.writeEtcFile(gimConfigPath, g.content())

	g.modDir = k.mkdirAll(sysfs.Modules + "/gim")
	pdir := k.mkdir(g.modDir, "parameters")
	for _, o := range g.options {
		v := g.params[o.name]
		// uint parameters: -1 shows as 4294967295.
		k.constAttr(pdir, o.name, strconv.FormatUint(uint64(uint32(int32(v))), 10)+"\n")
	}
	k.constAttr(g.modDir, "initstate", "live\n")
	k.gim = g

	for _, d := range k.sortedDevs() {
		if d.gone || !isGIMDevice(d) || d.sriov == nil {
			continue
		}
		g.adapters = append(g.adapters, d)
		n := g.value("vf_num")
		if n == 0 || n > totalVFs(d) {
			n = totalVFs(d)
		}
		if d.sriov.num == 0 {
			k.enableVFs(d, n)
		}
	}
	if k.drvByName[DrvGIM] == nil {
		k.registerDriver(gimDriverDef())
	}
}

// gimExit is gim_exit: SR-IOV off on every adapter (pci_disable_sriov
// removes the VFs, waiting for their VFIO users), then the driver and the
// module go. k.mu is held.
func (k *Kernel) gimExit() {
	g := k.gim
	for _, d := range g.adapters {
		k.disableVFsWhenFree(d)
	}
	if drv := k.drvByName[DrvGIM]; drv != nil {
		for _, d := range k.sortedDevs() {
			if d.driver == drv {
				k.unbindDriver(d)
			}
		}
		k.unregisterDriver(drv)
	}
	k.detachNode(g.modDir)
	k.gim = nil
}

func (g *gimState) value(name string) int {
	for _, o := range g.options {
		if o.name == name {
			return o.value
		}
	}
	return -1
}

// parseConfig is parse_config_file: "key value" pairs split at any of
// " =\n\t"; an unknown key ends the parse, values out of range are ignored.
func (g *gimState) parseConfig(data string) {
	toks := strings.FieldsFunc(strings.TrimRight(data, "\x00"), func(r rune) bool {
		return r == ' ' || r == '=' || r == '\n' || r == '\t'
	})
	for i := 0; i < len(toks); i += 2 {
		idx := slices.IndexFunc(g.options, func(o gimOption) bool { return o.name == toks[i] })
		if idx < 0 {
			return // "AMD GIM unknown token"
		}
		if i+1 >= len(toks) {
			return
		}
		v, err := strconv.Atoi(toks[i+1])
		if err != nil {
			continue // "Failed to transfer str"
		}
		if o := &g.options[idx]; v >= o.min && v <= o.max {
			o.value = v
		}
	}
}

// content is what save_config writes: "name=value\n" per option.
func (g *gimState) content() string {
	var b strings.Builder
	for _, o := range g.options {
		fmt.Fprintf(&b, "%s=%d\n", o.name, o.value)
	}
	return b.String()
}

// gimDriverDef is gim's pci_driver: id_table NULL, no sriov_configure.
func gimDriverDef() driverDef { return driverDef{name: DrvGIM} }

// etcFile is the content of a host configuration file ("" when absent).
func (k *Kernel) etcFile(p string) string {
	n, errno := k.resolve(p, true)
	if errno != 0 || n.show == nil {
		return ""
	}
	return n.show()
}

// writeEtcFile writes data at offset 0 of a host file, creating it but not
// truncating it, as GIM's write_config_file does.
func (k *Kernel) writeEtcFile(p, data string) {
	old := []byte(k.etcFile(p))
	if len(old) > len(data) {
		data += string(old[len(data):])
	}
	k.putHostFile(p, data)
	if k.host.OnFile != nil {
		k.host.OnFile(p, data)
	}
}

// putHostFile replaces the host file p with data (root's, mode 0644).
func (k *Kernel) putHostFile(p, data string) {
	dir, name := splitDir(p)
	d := k.mkdirAll(dir)
	k.detachNode(d.children[name])
	n := k.attr(d, name, func() string { return data }, nil)
	n.perm = 0o644
}

func splitDir(p string) (string, string) {
	i := strings.LastIndexByte(p, '/')
	return p[:i], p[i+1:]
}

// SetHostFile puts a host configuration file (such as /etc/gim_config, as
// an admin edits it) into the tree.
func (k *Kernel) SetHostFile(p, data string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.putHostFile(p, data)
}

// modprobe is kmod's modprobe for the modules a vGPU host loads and
// unloads at run time (gim): "modprobe gim [param=value...]" and
// "modprobe -r gim", with kmod's messages and exit codes; and the loading
// of xe-vfio-pci on Linux 6.19+ and of kvmgt on a host with i915 (gvtg.go).
func (k *Kernel) modprobe(args []string) (string, int) {
	remove := false
	var rest []string
	for _, a := range args {
		switch a {
		case "-r", "--remove":
			remove = true
		default:
			rest = append(rest, a)
		}
	}
	if len(rest) == 0 {
		return "modprobe: ERROR: missing parameters. See -h.\n", 1
	}
	name := rest[0]
	k.mu.Lock()
	defer k.mu.Unlock()
	// A fault armed on the tool's path fails this run as the module's
	// init or exit would, changing nothing.
	tool := k.canonical(sysfs.DefaultToolPaths()[sysfs.ToolModprobe])
	k.writes[tool]++
	if e := k.faultFor(tool); e != 0 {
		if remove {
			return fmt.Sprintf("modprobe: FATAL: Module %s is in use.\n", name), 1
		}
		return fmt.Sprintf("modprobe: ERROR: could not insert '%s': %s\n", name, e.Error()), 1
	}
	if (name == DrvXeVFIO || name == "xe_vfio_pci") && !remove && k.host.XeAdmin != XeAdminNone {
		k.loadXeVFIO() // no parameters; a second load does nothing
		return "", 0
	}
	if name == "kvmgt" && !remove && k.drvByName[DrvI915] != nil {
		k.loadKVMGT() // a second load does nothing
		return "", 0
	}
	if name != DrvGIM {
		if remove {
			return fmt.Sprintf("modprobe: FATAL: Module %s is not in kernel.\n", name), 1
		}
		if k.moduleLoaded(name) {
			return "", 0
		}
		return fmt.Sprintf("modprobe: FATAL: Module %s not found in directory /lib/modules/6.12.0-vgpusim\n", name), 1
	}
	if remove {
		if len(rest) > 1 {
			return "modprobe: ERROR: too many parameters\n", 1
		}
		if k.gim == nil {
			return "modprobe: FATAL: Module gim is not in kernel.\n", 1
		}
		k.gimExit()
		return "", 0
	}
	if k.gim != nil {
		return "", 0 // already loaded: modprobe does nothing, parameters unused
	}
	params := map[string]int{}
	for _, p := range rest[1:] {
		key, val, ok := strings.Cut(p, "=")
		v, err := strconv.ParseUint(val, 0, 32)
		if !ok || err != nil {
			// the kernel refuses the load: "gim: `x' invalid for parameter `vf_num'"
			return "modprobe: ERROR: could not insert 'gim': Invalid argument\n", 1
		}
		if !slices.ContainsFunc(gimOptions(), func(o gimOption) bool { return o.name == key }) {
			continue // "gim: unknown parameter 'x' ignored"
		}
		params[key] = int(int32(uint32(v)))
	}
	k.gimInit(params)
	return "", 0
}

// moduleLoaded: a driver or /sys/module entry of that name exists.
func (k *Kernel) moduleLoaded(name string) bool {
	if k.drvByName[name] != nil {
		return true
	}
	_, errno := k.resolve(sysfs.Modules+"/"+strings.ReplaceAll(name, "-", "_"), true)
	return errno == 0
}

// GIMConfig returns /etc/gim_config as GIM last wrote it ("" if never).
func (k *Kernel) GIMConfig() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.etcFile(gimConfigPath)
}
