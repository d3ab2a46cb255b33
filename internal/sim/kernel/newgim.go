package simkernel

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// New GIM (github.com/amd/MxGPU-Virtualization, 8.0.0.K source; MI300X
// and later), as its source and release notes describe it
// (docs/vendors/amd.md, "Sources of the rules above"):
//
//   - gim_init reads /etc/gim_config (gim_conf_init), lets the module
//     parameters override it and saves the persistent options back:
//     vf_num (a per-GPU list, the last value repeating), then
//     accelerator_partition_mode and memory_partition_mode.
//   - Its pci_driver has a NULL id_table, but gim_init adds libgv's device
//     ids with pci_add_dynid, so the driver core binds the PFs to gim: the
//     PF shows a driver link. There is no sriov_configure, so a write to
//     sriov_numvfs answers ENOENT (sriov_numvfs_store).
//   - Each GPU it probes gets pci_enable_sriov(vf_num[i]) at device init
//     (mi300_gpuiov_hw_init), and the PSP its accelerator partition: the
//     saved mode when it suits the VF count, else the count's default
//     (mi300_psp_set_accelerator_partition_mode), saved to the file.
//   - At run time amd-smi's set --num-vf reaches amdgv_int_set_vf_number:
//     refused (VF_BUSY) unless every VF is idle, then pci_disable_sriov
//     and pci_enable_sriov with the new count (amdgv_gpuiov_set_sriov_vf_num).
//     Nothing saves vf_num there: the next load takes the file's again.
//   - gim_remove (unbind, rmmod) disables SR-IOV (mi300_gpuiov_hw_fini).

// newGIMDef is what new GIM offers on one model.
type newGIMDef struct {
	// counts are the VF counts the driver takes for this GPU.
	counts []int
	// numXCC is the partition count of CPX, which the driver allows with
	// any VF count (mi300_nbio_is_accelerator_partition_mode_supported).
	numXCC int
	// profiles maps an accelerator partition profile index to its
	// partition count (mi300x_accelerator_partition_profile_configs).
	profiles []int
	// memory is the memory partition (NPS) a VF count runs with.
	memory map[int]int
}

// newGIMState is the loaded module: its options and the GPUs it drives,
// in probe order (the GPU index of vf_num=N0,N1...).
type newGIMState struct {
	vfNum    []int // per GPU index; the last value repeats
	accel    int   // accelerator_partition_mode as the file holds it
	memory   int   // memory_partition_mode as the file holds it
	adapters []*pciDev
	parts    map[*pciDev]int // the accelerator partition each GPU runs
	modDir   *node
}

// newGIMMaxVF is VF_NUMBER__MAX (gim_shim/gim_config.h).
const newGIMMaxVF = 31

// partitionName is mi300_get_accelerator_partition_mode_desc.
func partitionName(n int) string {
	switch n {
	case 1:
		return "SPX"
	case 2:
		return "DPX"
	case 4:
		return "QPX"
	case 8:
		return "CPX"
	}
	return "UNKNOWN"
}

// isNewGIMModel: new GIM drives PFs of this model.
func isNewGIMModel(m *modelDef) bool { return m != nil && m.newGIM != nil }

// newGIMDriverDef is gim's pci_driver once gim_init has added libgv's
// device ids (pci_add_dynid): it binds the PFs of the host's models.
func newGIMDriverDef() driverDef {
	d := driverDef{name: DrvGIM}
	for _, name := range Models() {
		if m, _ := lookupModel(name); isNewGIMModel(m) {
			d.ids = append(d.ids, pciID{uint32(m.ids.vendor), uint32(m.ids.device)})
		}
	}
	return d
}

// hostHasNewGIM: the host's gim is new GIM (one gim module per host).
func (h Host) hostHasNewGIM() bool {
	return slices.ContainsFunc(h.GPUs, func(g HostGPU) bool {
		m, _ := lookupModel(g.Model)
		return isNewGIMModel(m)
	})
}

// newGIMInit is gim_init up to pci_register_driver: the options from the
// file, saved back (the simulated host passes no module parameters).
// k.mu is held.
func (k *Kernel) newGIMInit() {
	g := &newGIMState{vfNum: []int{1}, parts: map[*pciDev]int{}}
	g.parseConfig(k.etcFile(gimConfigPath))
	g.modDir = k.mkdirAll(sysfs.Modules + "/gim")
	k.constAttr(g.modDir, "initstate", "live\n")
	k.ngim = g
	g.save(k)
}

// parseVFNum is gim_handle_array_token: a value out of 1-31 takes the
// default (1).
func parseVFNum(s string) []int {
	var out []int
	for _, t := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(t))
		if err != nil || v < 1 || v > newGIMMaxVF {
			v = 1
		}
		out = append(out, v)
	}
	return out
}

// parseConfig is gim_conf_parse_conf_file for the persistent options: an
// unknown key makes GIM truncate the file and keep its defaults.
func (g *newGIMState) parseConfig(data string) {
	for _, line := range strings.Split(strings.TrimRight(data, "\x00"), "\n") {
		key, val, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		switch key {
		case "vf_num":
			g.vfNum = parseVFNum(val)
		case "accelerator_partition_mode", "memory_partition_mode":
			v, err := strconv.Atoi(val)
			if err != nil || v < 0 || v > 8 {
				continue
			}
			if key == "memory_partition_mode" {
				g.memory = v
			} else {
				g.accel = v
			}
		default:
			g.vfNum, g.accel, g.memory = []int{1}, 0, 0
			return
		}
	}
}

// save is gim_conf_save: the persistent options, vf_num as a list, written
// over the file without truncating it (gim_conf_write_conf_file).
func (g *newGIMState) save(k *Kernel) {
	nums := make([]string, len(g.vfNum))
	for i, n := range g.vfNum {
		nums[i] = strconv.Itoa(n)
	}
	data := fmt.Sprintf("vf_num=%s\naccelerator_partition_mode=%d\nmemory_partition_mode=%d\n",
		strings.Join(nums, ","), g.accel, g.memory)
	k.writeEtcFile(gimConfigPath, data) // O_RDWR without O_TRUNC, as old GIM
}

// vfNumFor is gim_conf_get_vf_num_opt for GPU index i.
func (g *newGIMState) vfNumFor(i int) int {
	if i >= len(g.vfNum) {
		return g.vfNum[len(g.vfNum)-1]
	}
	return g.vfNum[i]
}

// newGIMProbe is gim_probe and device init on PF d: SR-IOV with the GPU's
// vf_num (capped at what the GPU offers, as max_num_vf caps it), then its
// accelerator partition. k.mu is held.
func (k *Kernel) newGIMProbe(d *pciDev) {
	g := k.ngim
	n := g.vfNumFor(len(g.adapters))
	g.adapters = append(g.adapters, d)
	def := d.model.newGIM
	if !slices.Contains(def.counts, n) {
		n = slices.Max(slices.DeleteFunc(slices.Clone(def.counts), func(c int) bool { return c > n }))
	}
	if d.sriov.num == 0 {
		k.enableVFs(d, n)
	}
	k.newGIMPartition(d, g.accel)
}

// newGIMPartition sets d's accelerator partition as the PSP does: want
// when it suits the VF count (equal to it, or CPX), else the count's
// default; the mode and the memory partition are saved to the file.
func (k *Kernel) newGIMPartition(d *pciDev, want int) {
	g, def, n := k.ngim, d.model.newGIM, d.sriov.num
	if def.profiles == nil {
		return // no compute partitions (V710)
	}
	if want != n && want != def.numXCC {
		want = n
	}
	g.parts[d] = want
	g.accel, g.memory = want, def.memory[n]
	g.save(k)
}

// newGIMRemove is gim_remove: SR-IOV off. k.mu is held.
func (k *Kernel) newGIMRemove(d *pciDev) {
	if g := k.ngim; g != nil {
		delete(g.parts, d)
	}
}

// newGIMBusy is amdgv_int_set_vf_number's check: a VF a guest uses is not
// avail/unavail. A VF open by a VFIO user (a running VM) stands for that.
func (k *Kernel) newGIMBusy(pf *pciDev) bool {
	for _, vf := range pf.sriov.vfs {
		if !vf.gone && (vf.busy || k.inUse(vf)) {
			return true
		}
	}
	return false
}

// smiError is how amd-smi prints an SMI-LIB error (SmiToolSMILIBErrorException
// through print_errors): on stderr, and the CLI still exits 0 (smi_cli_main.cpp).
func smiError(status int, msg string) string {
	code := -1000 - status
	return fmt.Sprintf("SMI-LIB has returned error %d - %s. Error code: %d\n", code, msg, code)
}

// amd-smi statuses (smi-lib/interface/amdsmi.h) and their CLI messages.
const (
	smiInval        = 1
	smiNotSupported = 2
	smiAPIFail      = 7
	smiBusy         = 30
	smiNotFound     = 31
)

// amdSMI is the host amd-smi of new GIM for what vgpu uses: "set
// --gpu=G --num-vf=N", "set --gpu=G --accelerator-partition=I" and
// "static --gpu=G --num-vf". G is a BDF or a GPU index. Errors print as
// the CLI prints them, with exit 0; a usage error exits 1.
func (k *Kernel) amdSMI(args []string) (string, int) {
	if len(args) == 0 {
		return "usage: amd-smi [-h] {version,list,static,firmware,bad-pages,metric,process,profile,event,topology,set,reset,monitor,xgmi,partition,ras} ...\n", 1
	}
	cmd := args[0]
	opts := map[string]string{}
	for _, a := range args[1:] {
		key, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		opts[key] = val
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	tool := k.canonical(sysfs.DefaultToolPaths()[sysfs.ToolAMDSMI])
	if cmd == "set" {
		k.writes[tool]++
		// A fault armed on the tool's path fails the call in libgv,
		// changing nothing.
		if e := k.faultFor(tool); e != 0 {
			return smiError(smiAPIFail, "API call failed"), 0
		}
	}
	g := k.ngim
	if g == nil {
		return "AMD-SMI: the gim driver is not loaded\n", 1
	}
	var pf *pciDev
	for i, d := range g.adapters {
		if opts["gpu"] == d.name || opts["gpu"] == strconv.Itoa(i) {
			pf = d
		}
	}
	if pf == nil || pf.gone {
		return smiError(smiNotFound, "Device Not found"), 0
	}
	idx := slices.Index(g.adapters, pf)
	def := pf.model.newGIM
	switch cmd {
	case "static":
		return fmt.Sprintf("GPU: %d\n    NUM_VF: \n        SUPPORTED: %d \n        ENABLED: %d\n"+
			"    PARTITION:\n        ACCELERATOR_PARTITION: %s\n        MEMORY_PARTITION: NPS%d\n",
			idx, slices.Max(def.counts), pf.sriov.num, partitionName(g.parts[pf]), def.memory[pf.sriov.num]), 0
	case "set":
	default:
		return fmt.Sprintf("amd-smi: command %q is not simulated\n", cmd), 1
	}
	if v, ok := opts["num-vf"]; ok {
		n, err := strconv.Atoi(v)
		switch {
		case k.newGIMBusy(pf):
			return smiError(smiBusy, "Device busy"), 0
		case err != nil || !slices.Contains(def.counts, n):
			return smiError(smiInval, "Invalid parameters"), 0
		}
		if n != pf.sriov.num {
			k.disableVFs(pf)
			k.enableVFs(pf, n)
		}
		// The partition count follows the VF count (release notes 9.x:
		// "the number of VFs equals the compute partition count").
		k.newGIMPartition(pf, n)
		return fmt.Sprintf("GPU: %d\n    NUM_VF: Successfully set number of VFs to %d\n", idx, n), 0
	}
	if v, ok := opts["accelerator-partition"]; ok {
		i, err := strconv.Atoi(v)
		fail := fmt.Sprintf("ACCELERATOR_PARTITION: Can't set accelerator partition to %s. Check amd-smi partition command for more information.\n", v)
		if def.profiles == nil {
			return fail + smiError(smiNotSupported, "Command not supported"), 0
		}
		if err != nil || i < 0 || i >= len(def.profiles) {
			return fail + smiError(smiInval, "Invalid parameters"), 0
		}
		// mi300_set_accelerator_partition_profile: the mode must suit
		// the VF count; it never changes the count.
		if p := def.profiles[i]; p != pf.sriov.num && p != def.numXCC {
			return fail + smiError(smiInval, "Invalid parameters"), 0
		}
		k.newGIMPartition(pf, def.profiles[i])
		return fmt.Sprintf("GPU: %d\n    ACCELERATOR_PARTITION: Successfully set accelerator partition to %s\n", idx, v), 0
	}
	return "amd-smi set: want --num-vf or --accelerator-partition\n", 1
}

// AcceleratorPartition is the accelerator partition new GIM runs GPU
// addr with ("" when gim does not drive it).
func (k *Kernel) AcceleratorPartition(addr string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.devs[addr]
	if k.ngim == nil || d == nil {
		return ""
	}
	if _, ok := k.ngim.parts[d]; !ok {
		return ""
	}
	return partitionName(k.ngim.parts[d])
}
