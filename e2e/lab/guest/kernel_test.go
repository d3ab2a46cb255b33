//go:build labguest

package guest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// carver is vgpu's carver as vgpuctl builds it, with the lab's test
// catalog, on the real kernel.
func carver(t *testing.T) *carve.Carver {
	t.Helper()
	cat, err := profile.Load(profilesDir)
	if err != nil {
		t.Fatalf("load the lab catalog: %v", err)
	}
	dir := stateDir(t)
	return carve.New(host, cat, carve.NewFileDriverStore(filepath.Join(dir, "drivers.json")),
		carve.WithLocker(carve.NewLocker(filepath.Join(dir, "locks"))))
}

type gpusJSON struct {
	GPUs        []inventory.GPU        `json:"gpus"`
	MdevParents []inventory.MdevParent `json:"mdevParents"`
}

func findType(ts []inventory.MdevType, id string) (inventory.MdevType, bool) {
	i := slices.IndexFunc(ts, func(x inventory.MdevType) bool { return x.ID == id })
	if i < 0 {
		return inventory.MdevType{}, false
	}
	return ts[i], true
}

// TestInventory: vgpuctl lists the sample mdev parents with their types and
// shared counters; the inventory sees the SR-IOV PFs with their limits.
func TestInventory(t *testing.T) {
	out, _, code := vgpuctl(t, "gpus", "-o", "json")
	if code != 0 {
		t.Fatalf("vgpuctl gpus: exit %d", code)
	}
	var got gpusJSON
	decode(t, out, &got)
	for _, g := range got.GPUs {
		if g.Address == igbPF || g.Address == nvmePF {
			t.Errorf("vgpuctl gpus lists %s (class %#06x), which is not a GPU", g.Address, g.Class)
		}
	}
	parents := map[string]inventory.MdevParent{}
	for _, p := range got.MdevParents {
		parents[p.Name] = p
	}
	want := map[string]map[string]int{ // parent -> type -> available instances
		"mbochs": {"mbochs-small": 64, "mbochs-medium": 16, "mbochs-large": 4},
		"mtty":   {"mtty-1": 24, "mtty-2": 12},
		"mdpy":   {"mdpy-vga": 4, "mdpy-xga": 4, "mdpy-hd": 4},
	}
	for name, types := range want {
		p, ok := parents[name]
		if !ok {
			t.Errorf("vgpuctl gpus: no mdev parent %s (got %v)", name, got.MdevParents)
			continue
		}
		if p.PCI != nil {
			t.Errorf("%s: a virtual parent with a PCI address %s", name, p.PCI)
		}
		for id, avail := range types {
			ty, ok := findType(p.Types, id)
			if !ok {
				t.Errorf("%s: no type %s in %+v", name, id, p.Types)
				continue
			}
			if ty.AvailableInstances != avail || ty.DeviceAPI != "vfio-pci" {
				t.Errorf("%s/%s: available %d, api %q; want %d, vfio-pci", name, id, ty.AvailableInstances, ty.DeviceAPI, avail)
			}
		}
	}
	if ty, _ := findType(parents["mbochs"].Types, "mbochs-large"); ty.Name != "mbochs-large" ||
		!strings.Contains(ty.Description, "64 MB video memory") {
		t.Errorf("mbochs-large: name %q description %q", ty.Name, ty.Description)
	}
	if ty, _ := findType(parents["mtty"].Types, "mtty-2"); ty.Name != "Dual port serial" {
		t.Errorf("mtty-2: name %q, want the driver's pretty name", ty.Name)
	}

	// Relabelled as accelerators, the SR-IOV PFs are listed with what the
	// kernel says of them.
	relabelAsGPU(t, igbPF, nvmePF)
	out, _, code = vgpuctl(t, "gpus", "-o", "json")
	if code != 0 {
		t.Fatalf("vgpuctl gpus: exit %d", code)
	}
	got = gpusJSON{}
	decode(t, out, &got)
	byAddr := map[pci.Address]inventory.GPU{}
	for _, g := range got.GPUs {
		byAddr[g.Address] = g
	}
	for _, c := range []struct {
		addr           pci.Address
		vendor, device uint16
		driver         string
		total          int
		vfDevice       uint16
		splits         string
	}{
		{igbPF, 0x8086, 0x10c9, "igb", 7, 0x10ca, "1,2,4"},
		{nvmePF, 0x1b36, 0x0010, "nvme", 4, 0x0010, "1"},
	} {
		g, ok := byAddr[c.addr]
		if !ok {
			t.Errorf("vgpuctl gpus: %s missing (got %v)", c.addr, got.GPUs)
			continue
		}
		if g.VendorID != c.vendor || g.DeviceID != c.device || g.Driver != c.driver || g.IOMMUGroup < 0 {
			t.Errorf("%s: %04x:%04x driver %q group %d; want %04x:%04x %s and a group",
				c.addr, g.VendorID, g.DeviceID, g.Driver, g.IOMMUGroup, c.vendor, c.device, c.driver)
		}
		if g.SRIOV == nil || g.SRIOV.TotalVFs != c.total || g.SRIOV.NumVFs != 0 || g.SRIOV.VFDeviceID != c.vfDevice {
			t.Errorf("%s: SR-IOV %+v; want %d VFs possible, 0 enabled, VF device %04x", c.addr, g.SRIOV, c.total, c.vfDevice)
		}
		if !slices.Equal(g.Dialects, []inventory.Dialect{inventory.DialectSRIOV, inventory.DialectPassthrough}) {
			t.Errorf("%s: dialects %v; want sriov, passthrough", c.addr, g.Dialects)
		}
	}
	table, _, code := vgpuctl(t, "gpus")
	if code != 0 || !strings.Contains(table, "sriov,passthrough  1,2,4") {
		t.Errorf("vgpuctl gpus table: exit %d, the igb row lacks its dialects and the splits of the lab catalog", code)
	}
}

func vfsOf(t *testing.T, pf pci.Address) []sriov.VF {
	t.Helper()
	vfs, err := sriov.VFs(host, pf)
	if err != nil {
		t.Fatalf("VFs of %s: %v", pf, err)
	}
	return vfs
}

type carveJSON struct {
	Plan    carve.Plan `json:"plan"`
	Applied int        `json:"applied"`
	Error   string     `json:"error"`
}

// TestCarveSRIOV: vgpuctl carves VFs onto vfio-pci (whose /dev/vfio nodes
// open through the whole VFIO uAPI), changes the count N->M (which the
// kernel refuses as one write), lists the vGPUs, refuses to destroy a VF in
// use, and uncarves back to the PF's driver.
func TestCarveSRIOV(t *testing.T) {
	relabelAsGPU(t, igbPF)
	igb := igbPF.String()
	probed := vfDriverProbes(t)
	out, _, code := vgpuctl(t, "carve", igb, "--profile", "lab-igb-4", "-o", "json")
	var res carveJSON
	decode(t, out, &res)
	if code != 0 || res.Applied != 5 {
		t.Fatalf("carve lab-igb-4: exit %d, %d steps applied, error %q", code, res.Applied, res.Error)
	}
	vfs := vfsOf(t, igbPF)
	if len(vfs) != 4 || readAttr(t, pci.DevicePath(igbPF)+"/sriov_numvfs") != "4" {
		t.Fatalf("after carve lab-igb-4: %d VFs", len(vfs))
	}
	for _, vf := range vfs {
		if d := driverOf(t, vf.Address); d != "vfio-pci" {
			t.Errorf("VF %s on %q, want vfio-pci", vf.Address, d)
			continue
		}
		mustOpenVFIO(t, pci.DevicePath(vf.Address), vf.Address.String()).Close()
	}
	if d := driverOf(t, igbPF); d != "igb" {
		t.Errorf("PF on %q after carve, want igb", d)
	}
	// The VFs appeared with autoprobe off: igbvf never probed one (the
	// kernel log), and the PF's setting is back on.
	if n := vfDriverProbes(t); n != probed {
		t.Errorf("igbvf probed %d VFs during the carve; want none (sriov_drivers_autoprobe off)", n-probed)
	}
	if v := readAttr(t, pci.DevicePath(igbPF)+"/sriov_drivers_autoprobe"); v != "1" {
		t.Errorf("sriov_drivers_autoprobe after the carve = %q, want 1 (restored)", v)
	}
	if out, _, code := vgpuctl(t, "carve", igb, "--profile", "lab-igb-4"); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Errorf("carve lab-igb-4 again: exit %d; want nothing to do", code)
	}

	// 4 -> 2: the kernel refuses N->M (EBUSY); vgpu goes through 0.
	if _, _, code := vgpuctl(t, "carve", igb, "--profile", "lab-igb-2"); code != 0 {
		t.Fatalf("carve lab-igb-2: exit %d", code)
	}
	vfs = vfsOf(t, igbPF)
	if len(vfs) != 2 {
		t.Fatalf("after carve lab-igb-2: %d VFs, want 2", len(vfs))
	}
	if n := vfDriverProbes(t); n != probed {
		t.Errorf("igbvf probed %d VFs by the re-split; want none", n-probed)
	}
	for _, vf := range vfs {
		if d := driverOf(t, vf.Address); d != "vfio-pci" {
			t.Errorf("VF %s on %q, want vfio-pci", vf.Address, d)
		}
	}

	// A VF held by a VFIO user (as QEMU holds it) is not destroyed.
	held := vfs[0].Address.String()
	s := mustOpenVFIO(t, pci.DevicePath(vfs[0].Address), held)
	out, _, code = vgpuctl(t, "vgpus", "-o", "json")
	if code != 0 || !strings.Contains(out, held) {
		t.Errorf("vgpuctl vgpus: exit %d, %s not listed", code, held)
	}
	_, errOut, code := vgpuctl(t, "uncarve", igb)
	if code != 3 || !strings.Contains(errOut, held) || !strings.Contains(errOut, "in use") {
		t.Errorf("uncarve with %s held: exit %d, %q; want exit 3 naming it", held, code, errOut)
	}
	if n := len(vfsOf(t, igbPF)); n != 2 {
		t.Errorf("refused uncarve left %d VFs, want 2", n)
	}
	s.Close()

	if _, _, code := vgpuctl(t, "uncarve", igb); code != 0 {
		t.Fatalf("uncarve: exit %d", code)
	}
	if n := len(vfsOf(t, igbPF)); n != 0 {
		t.Errorf("after uncarve: %d VFs", n)
	}
	if d := driverOf(t, igbPF); d != "igb" {
		t.Errorf("PF on %q after uncarve, want igb", d)
	}
}

// TestPassthroughRestoresDriver: vgpuctl passes the NVMe controller through
// whole (vfio-pci, its VFIO node opens) and uncarve gives it back to nvme.
func TestPassthroughRestoresDriver(t *testing.T) {
	relabelAsGPU(t, nvmePF)
	settleDriver(t, nvmePF, "nvme")
	if _, _, code := vgpuctl(t, "carve", nvmePF.String(), "--profile", "lab-nvme-full"); code != 0 {
		t.Fatalf("carve lab-nvme-full: exit %d", code)
	}
	if d := driverOf(t, nvmePF); d != "vfio-pci" {
		t.Fatalf("PF on %q after passthrough carve, want vfio-pci", d)
	}
	mustOpenVFIO(t, pci.DevicePath(nvmePF), nvmePF.String()).Close()
	if _, _, code := vgpuctl(t, "uncarve", nvmePF.String()); code != 0 {
		t.Fatalf("uncarve: exit %d", code)
	}
	settleDriver(t, nvmePF, "nvme")
	if ov := readAttr(t, pci.DevicePath(nvmePF)+"/driver_override"); ov != "(null)" {
		t.Errorf("driver_override %q after uncarve, want (null)", ov)
	}
	if _, err := os.Stat("/dev/vfio/" + filepathBase(t, pci.DevicePath(nvmePF))); err == nil {
		t.Errorf("the PF's /dev/vfio node is still there after uncarve")
	}
}

// TestPassthroughMovesTheCard: whole-GPU passthrough of a two-function
// card moves its other function (HD audio, in the same IOMMU group, as a
// GPU's HDMI audio) to vfio-pci too, so VFIO finds the group viable and the
// PF opens; the uncarve gives each function its own driver back.
func TestPassthroughMovesTheCard(t *testing.T) {
	for _, m := range []string{"e1000e", "snd_hda_intel"} { // no udev here to load them
		if _, errOut, code := run(t, "modprobe", m); code != 0 {
			t.Fatalf("modprobe %s: exit %d: %s", m, code, errOut)
		}
	}
	relabelAsGPU(t, cardPF)
	settleDriver(t, cardPF, "e1000e")
	settleDriver(t, cardAudio, "snd_hda_intel")
	if g, a := filepathBase(t, pci.DevicePath(cardPF)), filepathBase(t, pci.DevicePath(cardAudio)); g != a {
		t.Fatalf("the card's functions are in IOMMU groups %s and %s; the test needs them in one", g, a)
	}
	if _, errOut, code := vgpuctl(t, "carve", cardPF.String(), "--profile", "lab-e1000e-full"); code != 0 {
		t.Fatalf("carve lab-e1000e-full: exit %d: %s", code, errOut)
	}
	for _, a := range []pci.Address{cardPF, cardAudio} {
		if d := driverOf(t, a); d != "vfio-pci" {
			t.Errorf("%s on %q after the passthrough carve, want vfio-pci", a, d)
		}
	}
	// VFIO opens a device only when every device of its group is on a VFIO
	// driver (or none): the audio function had to move.
	mustOpenVFIO(t, pci.DevicePath(cardPF), cardPF.String()).Close()
	if _, errOut, code := vgpuctl(t, "uncarve", cardPF.String()); code != 0 {
		t.Fatalf("uncarve: exit %d: %s", code, errOut)
	}
	settleDriver(t, cardPF, "e1000e")
	settleDriver(t, cardAudio, "snd_hda_intel")
}

// TestPassthroughBuiltinMovesTheCard: the same card with no catalog entry
// (the lab's catalog left out) is passed through by the built-in
// passthrough profile, its audio function with it, and given back.
func TestPassthroughBuiltinMovesTheCard(t *testing.T) {
	for _, m := range []string{"e1000e", "snd_hda_intel"} {
		if _, errOut, code := run(t, "modprobe", m); code != 0 {
			t.Fatalf("modprobe %s: exit %d: %s", m, code, errOut)
		}
	}
	relabelAsGPU(t, cardPF)
	settleDriver(t, cardPF, "e1000e")
	settleDriver(t, cardAudio, "snd_hda_intel")
	bare := func(args ...string) (string, string, int) { // the built-in catalog alone
		return run(t, "vgpuctl", append([]string{"--profiles", t.TempDir(), "--state-dir", stateDir(t)}, args...)...)
	}
	out, errOut, code := bare("profiles", "--gpu", cardPF.String(), "-o", "json")
	var rows []struct {
		Name     string   `json:"name"`
		HostGPUs []string `json:"hostGPUs"`
	}
	decode(t, out, &rows)
	if code != 0 || len(rows) != 1 || rows[0].Name != "passthrough" || len(rows[0].HostGPUs) != 1 {
		t.Fatalf("profiles --gpu without the lab's catalog: exit %d, %+v, %s", code, rows, errOut)
	}
	if _, errOut, code := bare("carve", cardPF.String(), "--profile", "lab-e1000e-full"); code != 2 || !strings.Contains(errOut, "lab-e1000e-full") {
		t.Fatalf("the lab's profile without its catalog: exit %d: %s", code, errOut)
	}
	if _, errOut, code := bare("carve", cardPF.String(), "--profile", "passthrough"); code != 0 {
		t.Fatalf("carve passthrough: exit %d: %s", code, errOut)
	}
	for _, a := range []pci.Address{cardPF, cardAudio} {
		if d := driverOf(t, a); d != "vfio-pci" {
			t.Errorf("%s on %q after the passthrough carve, want vfio-pci", a, d)
		}
	}
	mustOpenVFIO(t, pci.DevicePath(cardPF), cardPF.String()).Close()
	if _, errOut, code := bare("uncarve", cardPF.String()); code != 0 {
		t.Fatalf("uncarve: exit %d: %s", code, errOut)
	}
	settleDriver(t, cardPF, "e1000e")
	settleDriver(t, cardAudio, "snd_hda_intel")
}

func filepathBase(t *testing.T, dev string) string {
	t.Helper()
	l, err := os.Readlink(dev + "/iommu_group")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Base(l)
}

// TestKernelErrors: the refusals docs/lab.md lists ("The differential test") come from the real kernel,
// and vgpu's packages report them in words with the errno kept.
func TestKernelErrors(t *testing.T) {
	numvfs := pci.DevicePath(igbPF) + "/sriov_numvfs"
	t.Cleanup(func() { _ = sriov.SetNumVFs(host, igbPF, 0) })

	t.Run("ERANGE", func(t *testing.T) {
		err := host.WriteFile(numvfs, []byte("8"))
		if !errors.Is(err, syscall.ERANGE) {
			t.Errorf("kernel: write 8 to %s: %v, want ERANGE", numvfs, err)
		}
		err = sriov.SetNumVFs(host, igbPF, 8)
		if !errors.Is(err, syscall.ERANGE) || !strings.Contains(err.Error(), "supports at most 7 VFs") {
			t.Errorf("sriov.SetNumVFs(8): %v; want ERANGE saying at most 7", err)
		}
	})
	t.Run("EBUSY N->M", func(t *testing.T) {
		if err := sriov.SetNumVFs(host, igbPF, 2); err != nil {
			t.Fatal(err)
		}
		err := host.WriteFile(numvfs, []byte("3"))
		if !errors.Is(err, syscall.EBUSY) {
			t.Errorf("kernel: 2 -> 3 VFs: %v, want EBUSY", err)
		}
		if err := sriov.SetNumVFs(host, igbPF, 3); err != nil {
			t.Errorf("sriov.SetNumVFs 2 -> 3 (through 0): %v", err)
		}
		if got := readAttr(t, numvfs); got != "3" {
			t.Errorf("sriov_numvfs %s, want 3", got)
		}
		if err := sriov.SetNumVFs(host, igbPF, 0); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ENOENT without a driver", func(t *testing.T) {
		if err := pci.Unbind(host, igbPF); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := host.WriteFile("/sys/bus/pci/drivers/igb/bind", []byte(igbPF.String())); err != nil {
				t.Errorf("rebind igb: %v", err)
			}
		}()
		err := sriov.SetNumVFs(host, igbPF, 2)
		if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "no driver bound") {
			t.Errorf("sriov.SetNumVFs on an unbound PF: %v; want ENOENT saying no driver is bound", err)
		}
	})

	var made []string
	t.Cleanup(func() {
		for _, u := range made {
			_ = mdev.Remove(host, u)
		}
	})
	create := func(parent, typ string) (string, error) {
		u := uuid.NewString()
		err := mdev.Create(host, parent, typ, u)
		if err == nil {
			made = append(made, u)
		}
		return u, err
	}
	t.Run("ENOSPC on a full parent", func(t *testing.T) {
		for i := range 4 {
			if _, err := create("mbochs", "mbochs-large"); err != nil {
				t.Fatalf("mbochs-large #%d: %v", i+1, err)
			}
		}
		_, err := create("mbochs", "mbochs-large")
		if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, mdev.ErrNoCapacity) ||
			!strings.Contains(err.Error(), "no instance of mbochs-large fits on mbochs (available_instances 0)") {
			t.Errorf("fifth mbochs-large: %v; want ENOSPC, ErrNoCapacity, saying none fits", err)
		}
		if got := readAttr(t, "/sys/class/mdev_bus/mbochs/mdev_supported_types/mbochs-small/available_instances"); got != "0" {
			t.Errorf("mbochs-small available %s on a full pool, want 0 (shared pool)", got)
		}
	})
	t.Run("EEXIST", func(t *testing.T) {
		u, err := create("mtty", "mtty-2")
		if err != nil {
			t.Fatal(err)
		}
		err = mdev.Create(host, "mtty", "mtty-1", u)
		if !errors.Is(err, syscall.EEXIST) || !errors.Is(err, mdev.ErrExists) ||
			!strings.Contains(err.Error(), "already exists (type mtty-2 on mtty)") {
			t.Errorf("create %s again: %v; want EEXIST, ErrExists, naming the instance", u, err)
		}
		if got := readAttr(t, "/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/available_instances"); got != "22" {
			t.Errorf("mtty-1 available %s after one mtty-2, want 22 (shared ports)", got)
		}
	})
	t.Run("EBUSY: a VFIO group admits one opener", func(t *testing.T) {
		u, err := create("mtty", "mtty-1")
		if err != nil {
			t.Fatal(err)
		}
		dev := sysfs.MdevDevices + "/" + u
		s := mustOpenVFIO(t, dev, u)
		defer s.Close()
		_, err = os.OpenFile("/dev/vfio/"+filepathBase(t, dev), os.O_RDWR, 0)
		if !errors.Is(err, syscall.EBUSY) {
			t.Errorf("second open of %s's group: %v, want EBUSY", u, err)
		}
	})
}

// vfDriverProbes counts igbvf's probe lines in the kernel log
// ("igbvf 0000:01:10.0: ..."): each is a VF the PF's VF driver took.
func vfDriverProbes(t *testing.T) int {
	t.Helper()
	out, _, code := run(t, "dmesg")
	if code != 0 {
		t.Fatalf("dmesg: exit %d", code)
	}
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "igbvf 0000:") {
			n++
		}
	}
	return n
}

// TestMttyReloadNewInode: the premise of mdev.TypeCache, on the real
// kernel. mtty registers its parent at module load; unloading and loading
// it again makes the parent's mdev_supported_types anew, and kernfs gives
// the new directory a new inode number (a new id from the root's cyclic
// idr), so a TypeCache reads the fixed attributes again.
func TestMttyReloadNewInode(t *testing.T) {
	const types = "/sys/class/mdev_bus/mtty/mdev_supported_types"
	ino := func() uint64 {
		t.Helper()
		fi, err := os.Stat(types)
		if err != nil {
			t.Fatalf("stat %s: %v", types, err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	host := sysfs.NewOS("/")
	cnt := sysfstest.Count(host)
	cf := mdev.WithTypeCache(cnt, mdev.NewTypeCache())
	fixedReads := func() int {
		t.Helper()
		cnt.Take()
		got, err := mdev.Types(cf, "mtty")
		if err != nil {
			t.Fatalf("Types(mtty) through the cache: %v", err)
		}
		if want, err := mdev.Types(host, "mtty"); err != nil || !slices.EqualFunc(got, want, func(a, b mdev.Type) bool {
			return a.ID == b.ID && a.Name == b.Name && a.AvailableInstances == b.AvailableInstances
		}) {
			t.Fatalf("Types(mtty) through the cache = %+v, want %+v (%v)", got, want, err)
		}
		return sysfstest.FixedTypeReads(cnt.Take())
	}
	first := ino()
	if n := fixedReads(); n == 0 {
		t.Fatal("the first read through the cache read no fixed attribute")
	}
	if again := ino(); again != first {
		t.Fatalf("inode of %s changed from %d to %d with nothing reloaded", types, first, again)
	}
	if n := fixedReads(); n != 0 {
		t.Fatalf("a second read of the same registration read %d fixed attributes, want 0", n)
	}
	if _, errOut, code := run(t, "modprobe", "-r", "mtty"); code != 0 {
		t.Fatalf("modprobe -r mtty (an mtty mdev left by another test?): exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(types); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat %s with mtty unloaded: %v, want ENOENT", types, err)
	}
	if _, errOut, code := run(t, "modprobe", "mtty"); code != 0 {
		t.Fatalf("modprobe mtty: exit %d: %s", code, errOut)
	}
	second := ino()
	t.Logf("inode of %s: %d before the reload, %d after", types, first, second)
	if second == first {
		t.Fatalf("inode of %s is still %d after mtty was unloaded and loaded again", types, first)
	}
	if n := fixedReads(); n == 0 {
		t.Fatal("after mtty was loaded again, the cache read no fixed attribute")
	}
}
