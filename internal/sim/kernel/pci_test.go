package simkernel

import (
	"errors"
	"io/fs"
	"syscall"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/pci/pcitest"
)

func TestFileModesAndErrors(t *testing.T) {
	k := newHost(t, ModelMI25, mi25Addr)
	tests := []struct {
		path string
		mode fs.FileMode
		size int64
	}{
		{devPath(mi25Addr, "vendor"), 0o444, 4096},
		{devPath(mi25Addr, "driver_override"), 0o644, 4096},
		{devPath(mi25Addr, "sriov_numvfs"), 0o644, 4096},
		{devPath(mi25Addr, "remove"), 0o200, 4096},
		{"/sys/bus/pci/drivers_probe", 0o200, 4096},
		{"/sys/bus/pci/drivers/vfio-pci/bind", 0o200, 4096},
		{"/sys/bus/pci/drivers/vfio-pci/unbind", 0o200, 4096},
		{"/sys/bus/pci/drivers/vfio-pci/new_id", 0o200, 4096},
		{devPath(mi25Addr, ""), fs.ModeDir | 0o755, 0},
		{"/dev/vfio/vfio", fs.ModeDevice | fs.ModeCharDevice | 0o666, 0},
	}
	for _, tt := range tests {
		fi, err := k.Stat(tt.path)
		if err != nil {
			t.Fatalf("stat %s: %v", tt.path, err)
		}
		if fi.Mode() != tt.mode || fi.Size() != tt.size {
			t.Errorf("stat %s: mode %v size %d, want %v size %d", tt.path, fi.Mode(), fi.Size(), tt.mode, tt.size)
		}
	}
	li, err := k.Lstat(devPath(mi25Addr, ""))
	if err != nil || li.Mode() != fs.ModeSymlink|0o777 || li.Name() != mi25Addr {
		t.Fatalf("lstat of the bus link: %v %v %v", li.Mode(), li.Name(), err)
	}
	if li.Sys().(*NodeSys).Ino == 0 {
		t.Error("no inode number")
	}

	_, err = k.ReadFile(devPath(mi25Addr, "remove"))
	wantErrno(t, "read write-only", err, syscall.EACCES)
	writeErr(t, k, devPath(mi25Addr, "vendor"), "0x10de", syscall.EACCES)
	_, err = k.ReadFile(devPath(mi25Addr, "nonexistent"))
	wantErrno(t, "read missing", err, syscall.ENOENT)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ENOENT does not satisfy fs.ErrNotExist: %v", err)
	}
	writeErr(t, k, devPath(mi25Addr, "nonexistent"), "1", syscall.ENOENT)
	_, err = k.ReadFile(devPath(mi25Addr, ""))
	wantErrno(t, "read dir", err, syscall.EISDIR)
	_, err = k.ReadFile(devPath(mi25Addr, "vendor/x"))
	wantErrno(t, "through a file", err, syscall.ENOTDIR)
	_, err = k.Readlink(devPath(mi25Addr, "vendor"))
	wantErrno(t, "readlink of a file", err, syscall.EINVAL)
	_, err = k.ReadDir(devPath(mi25Addr, "vendor"))
	wantErrno(t, "readdir of a file", err, syscall.ENOTDIR)
	writeErr(t, k, devPath(mi25Addr, "driver_override"), string(make([]byte, 5000)), syscall.E2BIG)

	// ".." after a link walks from the link's target, as the VFS does.
	if got := read(t, k, devPath(mi25Addr, "../"+mi25Addr+"/vendor")); got != "0x1002\n" {
		t.Errorf("dotdot read = %q", got)
	}
	if got := read(t, k, "/sys/bus/pci/devices/"+mi25Addr+"/../class"); got != "0x060400\n" {
		t.Errorf("root port class through ..: %q", got)
	}
}

func TestReadDirSortedAndLinksNotFollowed(t *testing.T) {
	k := newHost(t, ModelMI25, mi25Addr)
	ents, err := k.ReadDir(devPath(mi25Addr, ""))
	if err != nil {
		t.Fatal(err)
	}
	var prev string
	types := map[string]fs.FileMode{}
	for _, e := range ents {
		if e.Name() <= prev {
			t.Fatalf("ReadDir not sorted: %q after %q", e.Name(), prev)
		}
		prev = e.Name()
		types[e.Name()] = e.Type()
	}
	if types["driver"] != fs.ModeSymlink || types["iommu_group"] != fs.ModeSymlink || types["vendor"] != 0 {
		t.Errorf("entry types: driver %v iommu_group %v vendor %v", types["driver"], types["iommu_group"], types["vendor"])
	}
}

func TestDeviceLayout(t *testing.T) {
	k := newHost(t, ModelMI25, mi25Addr)
	links := map[string]string{
		devPath(mi25Addr, ""):                            "../../../devices/pci0000:02/0000:02:00.0/0000:03:00.0",
		devPath(mi25Addr, "driver"):                      "../../../../bus/pci/drivers/sriov-standin",
		devPath(mi25Addr, "subsystem"):                   "../../../../bus/pci",
		"/sys/bus/pci/drivers/sriov-standin/" + mi25Addr: "../../../../devices/pci0000:02/0000:02:00.0/0000:03:00.0",
		"/sys/bus/pci/devices/0000:02:00.0/driver":       "../../../bus/pci/drivers/pcieport",
		"/sys/kernel/iommu_groups/1/devices/" + mi25Addr: "../../../../devices/pci0000:02/0000:02:00.0/0000:03:00.0",
		devPath(mi25Addr, "iommu_group"):                 "../../../../kernel/iommu_groups/1",
	}
	for p, want := range links {
		got, err := k.Readlink(p)
		if err != nil || got != want {
			t.Errorf("readlink %s = %q, %v; want %q", p, got, err, want)
		}
	}
	attrs := map[string]string{
		"vendor": "0x1002\n", "device": "0x6860\n", "class": "0x038000\n", "numa_node": "0\n",
		"driver_override": "(null)\n", "subsystem_vendor": "0x1002\n", "enable": "1\n",
		"modalias":       "pci:v00001002d00006860sv00001002sd00000C35bc03sc80i00\n",
		"sriov_totalvfs": "16\n", "sriov_numvfs": "0\n", "sriov_offset": "1\n", "sriov_stride": "1\n",
		"sriov_vf_device": "686c\n", "sriov_drivers_autoprobe": "1\n", "reset_method": "flr bus\n",
	}
	for a, want := range attrs {
		if got := read(t, k, devPath(mi25Addr, a)); got != want {
			t.Errorf("%s = %q, want %q", a, got, want)
		}
	}
	wantExists(t, k, devPath(mi25Addr, "physfn"), false)
	wantExists(t, k, devPath(mi25Addr, "virtfn0"), false)
}

func TestDriverOverride(t *testing.T) {
	k := newHost(t, ModelPlain, plainAddr)
	p := devPath(plainAddr, "driver_override")
	tests := []struct{ write, want string }{
		{"vfio-pci", "vfio-pci\n"},
		{"", "vfio-pci\n"}, // an empty write never reaches the kernel's store
		{"\n", "(null)\n"},
		{"vfio-pci\n", "vfio-pci\n"},
		{"pci-stub\nignored", "pci-stub\n"},
		{"\nx", "(null)\n"},
	}
	for _, tt := range tests {
		write(t, k, p, tt.write)
		if got := read(t, k, p); got != tt.want {
			t.Errorf("after writing %q: %q, want %q", tt.write, got, tt.want)
		}
	}
}

// The measured binding sequence: override, unbind, drivers_probe.
func TestBindVFIOByOverride(t *testing.T) {
	k := newHost(t, ModelPlain, plainAddr)
	group := groupOf(t, k, devPath(plainAddr, ""))
	wantExists(t, k, "/dev/vfio/"+group, false)

	write(t, k, devPath(plainAddr, "driver_override"), "vfio-pci")
	write(t, k, "/sys/bus/pci/drivers/nouveau/unbind", plainAddr)
	if d := driverOf(k, plainAddr); d != "" {
		t.Fatalf("after unbind driver = %q", d)
	}
	wantExists(t, k, "/sys/bus/pci/drivers/nouveau/"+plainAddr, false)
	write(t, k, "/sys/bus/pci/drivers_probe", plainAddr+"\n")
	if d := driverOf(k, plainAddr); d != DrvVFIOPCI {
		t.Fatalf("after drivers_probe driver = %q, want vfio-pci", d)
	}
	wantExists(t, k, "/sys/bus/pci/drivers/vfio-pci/"+plainAddr, true)
	wantExists(t, k, "/dev/vfio/"+group, true)
	if got := read(t, k, devPath(plainAddr, "enable")); got != "0\n" {
		t.Errorf("vfio-pci enabled the idle device: %q", got)
	}
	if got := read(t, k, devPath(plainAddr, "uevent")); got[:16] != "DRIVER=vfio-pci\n" {
		t.Errorf("uevent = %q", got)
	}
	fi, err := k.Stat("/dev/vfio/" + group)
	if err != nil || fi.Mode() != fs.ModeDevice|fs.ModeCharDevice|0o600 {
		t.Fatalf("stat group node: %v %v", fi, err)
	}

	// Back: unbind (through the device's driver link, as scripts do)
	// removes the node; clear the override, reprobe to nouveau.
	write(t, k, devPath(plainAddr, "driver/unbind"), plainAddr)
	if got := k.Writes("/sys/bus/pci/drivers/vfio-pci/unbind"); got != 1 {
		t.Errorf("unbind through the link counted %d on the driver's attribute", got)
	}
	wantExists(t, k, "/dev/vfio/"+group, false)
	if d := overrideProbe(t, k, plainAddr, "\n"); d != DrvNouveau {
		t.Fatalf("reprobe without override: %q, want nouveau", d)
	}
}

func TestBindUnbindErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, k *Kernel)
		path  string
		value string
		errno syscall.Errno
		after string // driver after the write
	}{
		{"bind already bound, matching", nil, "/sys/bus/pci/drivers/nouveau/bind", plainAddr, syscall.EBUSY, DrvNouveau},
		{"bind not matching", func(t *testing.T, k *Kernel) {
			write(t, k, "/sys/bus/pci/drivers/nouveau/unbind", plainAddr)
		}, "/sys/bus/pci/drivers/vfio-pci/bind", plainAddr, syscall.ENODEV, ""},
		{"bind matching by override", func(t *testing.T, k *Kernel) {
			write(t, k, "/sys/bus/pci/drivers/nouveau/unbind", plainAddr)
			write(t, k, devPath(plainAddr, "driver_override"), "vfio-pci")
		}, "/sys/bus/pci/drivers/vfio-pci/bind", plainAddr, 0, DrvVFIOPCI},
		{"override excludes the table driver", func(t *testing.T, k *Kernel) {
			write(t, k, "/sys/bus/pci/drivers/nouveau/unbind", plainAddr)
			write(t, k, devPath(plainAddr, "driver_override"), "vfio-pci")
		}, "/sys/bus/pci/drivers/nouveau/bind", plainAddr, syscall.ENODEV, ""},
		{"bind unknown device", nil, "/sys/bus/pci/drivers/nouveau/bind", "0000:0b:00.0", syscall.ENODEV, DrvNouveau},
		{"bind short address", func(t *testing.T, k *Kernel) {
			write(t, k, "/sys/bus/pci/drivers/nouveau/unbind", plainAddr)
		}, "/sys/bus/pci/drivers/nouveau/bind", "0a:00.0", syscall.ENODEV, ""},
		{"bind upper case name", func(t *testing.T, k *Kernel) {
			write(t, k, "/sys/bus/pci/drivers/nouveau/unbind", plainAddr)
		}, "/sys/bus/pci/drivers/nouveau/bind", "0000:0A:00.0", syscall.ENODEV, ""},
		{"unbind from a driver it is not on", nil, "/sys/bus/pci/drivers/vfio-pci/unbind", plainAddr, syscall.ENODEV, DrvNouveau},
		{"unbind unknown device", nil, "/sys/bus/pci/drivers/nouveau/unbind", "0000:0b:00.0", syscall.ENODEV, DrvNouveau},
		{"unbind twice", func(t *testing.T, k *Kernel) {
			write(t, k, "/sys/bus/pci/drivers/nouveau/unbind", plainAddr)
		}, "/sys/bus/pci/drivers/nouveau/unbind", plainAddr, syscall.ENODEV, ""},
		{"drivers_probe unknown", nil, "/sys/bus/pci/drivers_probe", "0000:0b:00.0", syscall.ENODEV, DrvNouveau},
		{"drivers_probe bound is a no-op", nil, "/sys/bus/pci/drivers_probe", plainAddr, 0, DrvNouveau},
		{"drivers_probe with override to a missing driver", func(t *testing.T, k *Kernel) {
			write(t, k, "/sys/bus/pci/drivers/nouveau/unbind", plainAddr)
			write(t, k, devPath(plainAddr, "driver_override"), "nosuchdriver")
		}, "/sys/bus/pci/drivers_probe", plainAddr, 0, ""},
		{"vfio-pci refuses a bridge", func(t *testing.T, k *Kernel) {
			write(t, k, "/sys/bus/pci/drivers/pcieport/unbind", "0000:09:00.0")
			write(t, k, devPath("0000:09:00.0", "driver_override"), "vfio-pci")
		}, "/sys/bus/pci/drivers/vfio-pci/bind", "0000:09:00.0", syscall.EINVAL, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newHost(t, ModelPlain, plainAddr)
			if tt.setup != nil {
				tt.setup(t, k)
			}
			writeErr(t, k, tt.path, tt.value, tt.errno)
			if d := driverOf(k, plainAddr); tt.name != "vfio-pci refuses a bridge" && d != tt.after {
				t.Fatalf("driver after = %q, want %q", d, tt.after)
			}
		})
	}
}

func TestNewIDRemoveID(t *testing.T) {
	k := newHost(t, ModelPlain, plainAddr)
	write(t, k, "/sys/bus/pci/drivers/nouveau/unbind", plainAddr)
	writeErr(t, k, "/sys/bus/pci/drivers/vfio-pci/new_id", "10de", syscall.EINVAL)
	writeErr(t, k, "/sys/bus/pci/drivers/vfio-pci/new_id", "zz 2204", syscall.EINVAL)
	writeErr(t, k, "/sys/bus/pci/drivers/nouveau/new_id", "10de 2204", syscall.EEXIST)
	// With bus autoprobe, new_id attaches the unbound device at once.
	write(t, k, "/sys/bus/pci/drivers/vfio-pci/new_id", "10de 2204")
	if d := driverOf(k, plainAddr); d != DrvVFIOPCI {
		t.Fatalf("new_id did not attach: %q", d)
	}
	writeErr(t, k, "/sys/bus/pci/drivers/vfio-pci/remove_id", "10de 1111", syscall.ENODEV)
	write(t, k, "/sys/bus/pci/drivers/vfio-pci/remove_id", "10de 2204")
	writeErr(t, k, "/sys/bus/pci/drivers/vfio-pci/remove_id", "10de 2204", syscall.ENODEV)

	// Bus autoprobe off: new_id does not attach; an explicit bind does.
	write(t, k, "/sys/bus/pci/drivers/vfio-pci/unbind", plainAddr)
	write(t, k, "/sys/bus/pci/drivers_autoprobe", "0")
	if got := read(t, k, "/sys/bus/pci/drivers_autoprobe"); got != "0\n" {
		t.Fatalf("drivers_autoprobe = %q", got)
	}
	write(t, k, "/sys/bus/pci/drivers/vfio-pci/new_id", "0x10de 0x2204")
	if d := driverOf(k, plainAddr); d != "" {
		t.Fatalf("new_id attached with autoprobe off: %q", d)
	}
	write(t, k, "/sys/bus/pci/drivers/vfio-pci/bind", plainAddr)
	if d := driverOf(k, plainAddr); d != DrvVFIOPCI {
		t.Fatalf("bind after new_id: %q", d)
	}
	// bus_autoprobe_store looks at the first byte only.
	write(t, k, "/sys/bus/pci/drivers_autoprobe", "x")
	if got := read(t, k, "/sys/bus/pci/drivers_autoprobe"); got != "1\n" {
		t.Fatalf("drivers_autoprobe = %q", got)
	}
}

func TestOpenDevice(t *testing.T) {
	k := newHost(t, ModelPlain, plainAddr)
	node := toVFIO(t, k, plainAddr, DrvNouveau)

	h := openDevice(t, k, node)
	if n := k.OpenCount(node); n != 1 {
		t.Fatalf("OpenCount = %d", n)
	}
	_, err := k.OpenDevice(node)
	wantErrno(t, "second open", err, syscall.EBUSY)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("second Close = %v, want fs.ErrClosed", err)
	}
	if n := k.OpenCount(node); n != 0 {
		t.Fatalf("OpenCount after close = %d", n)
	}
	h2, err := k.OpenDevice(node)
	if err != nil {
		t.Fatalf("reopen after close: %v", err)
	}
	defer h2.Close()

	// The container node admits any number of openers.
	c1, err1 := k.OpenDevice("/dev/vfio/vfio")
	c2, err2 := k.OpenDevice("/dev/vfio/vfio")
	if err1 != nil || err2 != nil || k.OpenCount("/dev/vfio/vfio") != 2 {
		t.Fatalf("container opens: %v %v %d", err1, err2, k.OpenCount("/dev/vfio/vfio"))
	}
	c1.Close()
	c2.Close()

	_, err = k.OpenDevice("/dev/vfio/999")
	wantErrno(t, "open missing group", err, syscall.ENOENT)
	_, err = k.OpenDevice(devPath(plainAddr, "vendor"))
	wantErrno(t, "open read-only attr rw", err, syscall.EACCES)
	_, err = k.OpenDevice("/dev/vfio")
	wantErrno(t, "open dir", err, syscall.EISDIR)
	_, err = k.ReadFile(node)
	wantErrno(t, "read a group node", err, syscall.EINVAL)
	if k.OpenCount("/dev/vfio/nope") != 0 {
		t.Fatal("OpenCount of a missing node")
	}
}

func TestUnbindBlocksWhileOpen(t *testing.T) {
	k := newHost(t, ModelPlain, plainAddr)
	node := toVFIO(t, k, plainAddr, DrvNouveau)
	h := openDevice(t, k, node)
	done := pcitest.Async(func() error { return k.WriteFile("/sys/bus/pci/drivers/vfio-pci/unbind", []byte(plainAddr)) })
	pcitest.StillBlocked(t, "unbind", done)
	// Reads go on while the writer waits.
	if d := driverOf(k, plainAddr); d != DrvVFIOPCI {
		t.Fatalf("driver during the wait: %q", d)
	}
	h.Close()
	pcitest.Released(t, "unbind", done)
	wantExists(t, k, node, false)
	if d := driverOf(k, plainAddr); d != "" {
		t.Fatalf("driver after unbind: %q", d)
	}
}

func TestMiscAttributes(t *testing.T) {
	k := newHost(t, ModelPlain, plainAddr)
	// enable: EBUSY while bound; EIO disabling a disabled device.
	writeErr(t, k, devPath(plainAddr, "enable"), "0", syscall.EBUSY)
	write(t, k, "/sys/bus/pci/drivers/nouveau/unbind", plainAddr)
	writeErr(t, k, devPath(plainAddr, "enable"), "0", syscall.EIO)
	writeErr(t, k, devPath(plainAddr, "enable"), "x", syscall.EINVAL)
	write(t, k, devPath(plainAddr, "enable"), "1")
	if got := read(t, k, devPath(plainAddr, "enable")); got != "1\n" {
		t.Fatalf("enable = %q", got)
	}
	// reset_method
	writeErr(t, k, devPath(plainAddr, "reset_method"), "flr", syscall.EINVAL) // the 3090 has no FLR
	writeErr(t, k, devPath(plainAddr, "reset_method"), "bogus", syscall.EINVAL)
	write(t, k, devPath(plainAddr, "reset"), "1")
	write(t, k, devPath(plainAddr, "reset_method"), "\n")
	if got := read(t, k, devPath(plainAddr, "reset_method")); got != "" {
		t.Fatalf("reset_method after disabling = %q", got)
	}
	writeErr(t, k, devPath(plainAddr, "reset"), "1", syscall.ENOTTY)
	writeErr(t, k, devPath(plainAddr, "reset"), "2", syscall.EINVAL)
	write(t, k, devPath(plainAddr, "reset_method"), "default")
	if got := read(t, k, devPath(plainAddr, "reset_method")); got != "bus\n" {
		t.Fatalf("reset_method default = %q", got)
	}
	// numa_node
	write(t, k, devPath(plainAddr, "numa_node"), "-1")
	if got := read(t, k, devPath(plainAddr, "numa_node")); got != "-1\n" {
		t.Fatalf("numa_node = %q", got)
	}
	writeErr(t, k, devPath(plainAddr, "numa_node"), "3", syscall.EINVAL)
	// uevent
	write(t, k, devPath(plainAddr, "uevent"), "change")
	writeErr(t, k, devPath(plainAddr, "uevent"), "explode", syscall.EINVAL)
}

func TestRemoveAndRescan(t *testing.T) {
	k := newHost(t, ModelPlain, plainAddr)
	oldGroup := groupOf(t, k, devPath(plainAddr, ""))
	write(t, k, devPath(plainAddr, "remove"), "0") // no-op
	wantExists(t, k, devPath(plainAddr, ""), true)
	writeErr(t, k, devPath(plainAddr, "remove"), "yes", syscall.EINVAL)
	write(t, k, devPath(plainAddr, "remove"), "1")
	wantExists(t, k, devPath(plainAddr, ""), false)
	wantExists(t, k, "/sys/bus/pci/drivers/nouveau/"+plainAddr, false)
	// The card's audio function stays, and so does the group it shares.
	wantExists(t, k, "/sys/kernel/iommu_groups/"+oldGroup+"/devices/"+plainAddr, false)
	wantExists(t, k, "/sys/kernel/iommu_groups/"+oldGroup+"/devices/"+plainAudio, true)
	write(t, k, "/sys/bus/pci/rescan", "1")
	wantExists(t, k, devPath(plainAddr, ""), true)
	if g := groupOf(t, k, devPath(plainAddr, "")); g != oldGroup {
		t.Fatalf("after the rescan %s is in group %s, want %s with its audio function", plainAddr, g, oldGroup)
	}
	if d := driverOf(k, plainAddr); d != DrvNouveau {
		t.Fatalf("after rescan driver = %q", d)
	}
	// Removing the root port takes the GPU behind it.
	write(t, k, devPath("0000:09:00.0", "remove"), "1")
	wantExists(t, k, devPath(plainAddr, ""), false)
	wantExists(t, k, devPath("0000:09:00.0", ""), false)
	write(t, k, "/sys/bus/pci/rescan", "1")
	if d := driverOf(k, plainAddr); d != DrvNouveau {
		t.Fatalf("after second rescan driver = %q", d)
	}
	if d := driverOf(k, "0000:09:00.0"); d != DrvPCIePort {
		t.Fatalf("root port after rescan: %q", d)
	}
}

// A root port without ACS: the port, the card's functions and the other
// device behind it are one IOMMU group; /dev/vfio/<group> appears once any
// member is on vfio-pci; vfio-pci refuses the port itself (a bridge).
func TestSharedGroup(t *testing.T) {
	k := NewFor(t, Host{Version: HostVersion, GPUs: []HostGPU{
		{Model: ModelPlain, Address: pci.MustParseAddress(plainAddr), SharedGroup: true},
		{Model: ModelQEMUNVMe, Address: pci.MustParseAddress("0000:0a:01.0"), SharedGroup: true},
	}})
	const port = "0000:09:00.0"
	g := groupOf(t, k, devPath(port, ""))
	for _, dev := range []string{plainAddr, plainAudio, "0000:0a:01.0"} {
		if got := groupOf(t, k, devPath(dev, "")); got != g {
			t.Fatalf("%s in group %s, want the port's %s", dev, got, g)
		}
	}
	if got := linkBase(t, k, devPath(plainAudio, "driver")); got != DrvSndHDA {
		t.Fatalf("audio function on %s", got)
	}
	wantExists(t, k, "/dev/vfio/"+g, false)
	write(t, k, devPath(plainAudio, "driver_override"), DrvVFIOPCI)
	write(t, k, devPath(plainAudio, "driver/unbind"), plainAudio)
	write(t, k, "/sys/bus/pci/drivers_probe", plainAudio)
	wantExists(t, k, "/dev/vfio/"+g, true)
	write(t, k, devPath(port, "driver_override"), DrvVFIOPCI)
	write(t, k, devPath(port, "driver/unbind"), port)
	write(t, k, "/sys/bus/pci/drivers_probe", port)
	wantExists(t, k, devPath(port, "driver"), false) // vfio-pci refused the bridge
}
