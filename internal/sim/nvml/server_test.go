package simnvml

import (
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		gpus []GPU
	}{
		{"unknown model", []GPU{{Model: "A100-SXM4-80GB", BusID: bus}}},
		{"bad bus", []GPU{{Model: ModelA100PCIe40GB, BusID: "3b:00"}}},
		{"duplicate bus", []GPU{{Model: ModelA100PCIe40GB, BusID: "0000:3b:00.0"}, {Model: ModelA30PCIe24GB, BusID: "00000000:3B:00.0"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.gpus...); err == nil {
				t.Fatal("New succeeded")
			}
		})
	}
}

func TestUninitialized(t *testing.T) {
	s, err := New(GPU{Model: ModelA100PCIe40GB, BusID: bus})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Shutdown(); r != nvml.ERROR_UNINITIALIZED {
		t.Errorf("Shutdown before Init: %v", r)
	}
	if _, r := s.DeviceGetCount(); r != nvml.ERROR_UNINITIALIZED {
		t.Errorf("DeviceGetCount: %v", r)
	}
	if _, r := s.DeviceGetHandleByPciBusId(bus); r != nvml.ERROR_UNINITIALIZED {
		t.Errorf("DeviceGetHandleByPciBusId: %v", r)
	}
	// Init nests: a handle taken in a session stops working when the last
	// session ends.
	s.Init()
	s.Init()
	d, _ := s.DeviceGetHandleByIndex(0)
	s.Shutdown()
	if _, r := d.GetName(); r != nvml.SUCCESS {
		t.Errorf("GetName with one session left: %v", r)
	}
	s.Shutdown()
	if _, r := d.GetName(); r != nvml.ERROR_UNINITIALIZED {
		t.Errorf("GetName after Shutdown: %v", r)
	}
	if _, _, r := d.GetMigMode(); r != nvml.ERROR_UNINITIALIZED {
		t.Errorf("GetMigMode after Shutdown: %v", r)
	}
}

func TestIdentity(t *testing.T) {
	// Given out of PCI order on purpose: NVML indices follow the address.
	s, err := New(
		GPU{Model: ModelH100PCIe80GB, BusID: "0000:af:00.0"},
		GPU{Model: ModelA100PCIe40GB, BusID: "00000000:3B:00.0"},
		GPU{Model: ModelA30PCIe24GB, BusID: "0000:0b:00.0"},
	)
	if err != nil {
		t.Fatal(err)
	}
	s.Init()
	if n, r := s.DeviceGetCount(); r != nvml.SUCCESS || n != 3 {
		t.Fatalf("DeviceGetCount = %d, %v", n, r)
	}
	for i, want := range []struct {
		name, busID, legacy string
		pciID               uint32
		memMiB              uint64
	}{
		{"NVIDIA A30", "00000000:0B:00.0", "0000:0B:00.0", 0x20B710DE, 24576},
		{"NVIDIA A100-PCIE-40GB", "00000000:3B:00.0", "0000:3B:00.0", 0x20F110DE, 40960},
		{"NVIDIA H100 PCIe", "00000000:AF:00.0", "0000:AF:00.0", 0x233110DE, 81559}, // below the nominal 81920
	} {
		d, r := s.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			t.Fatal(r)
		}
		if name, _ := d.GetName(); name != want.name {
			t.Errorf("index %d: name %q, want %q", i, name, want.name)
		}
		pci, _ := d.GetPciInfo()
		if got := cString(pci.BusId[:]); got != want.busID {
			t.Errorf("index %d: BusId %q, want %q", i, got, want.busID)
		}
		if got := cString(pci.BusIdLegacy[:]); got != want.legacy {
			t.Errorf("index %d: BusIdLegacy %q, want %q", i, got, want.legacy)
		}
		if pci.PciDeviceId != want.pciID {
			t.Errorf("index %d: PciDeviceId %#x, want %#x", i, pci.PciDeviceId, want.pciID)
		}
		if mem, _ := d.GetMemoryInfo(); mem.Total != want.memMiB<<20 {
			t.Errorf("index %d: memory %d, want %d MiB", i, mem.Total, want.memMiB)
		}
		if idx, _ := d.GetIndex(); idx != i {
			t.Errorf("GetIndex = %d, want %d", idx, i)
		}
		id, _ := d.GetUUID()
		if byUUID, r := s.DeviceGetHandleByUUID(id); r != nvml.SUCCESS || byUUID != d {
			t.Errorf("DeviceGetHandleByUUID(%q) = %v", id, r)
		}
	}
	if _, r := s.DeviceGetHandleByIndex(3); r != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("index 3: %v", r)
	}
	if _, r := s.DeviceGetHandleByUUID("GPU-nope"); r != nvml.ERROR_NOT_FOUND {
		t.Errorf("unknown UUID: %v", r)
	}
}

func TestUUIDStable(t *testing.T) {
	a, _ := newGPU(t, ModelA100PCIe40GB)
	b, _ := newGPU(t, ModelH100PCIe80GB)
	da, _ := a.DeviceGetHandleByIndex(0)
	db, _ := b.DeviceGetHandleByIndex(0)
	ua, _ := da.GetUUID()
	ub, _ := db.GetUUID()
	if ua != ub || len(ua) != len("GPU-")+36 {
		t.Errorf("UUIDs %q and %q: want equal for one address", ua, ub)
	}
}

func TestHandleByPciBusId(t *testing.T) {
	s, want := newGPU(t, ModelA100PCIe40GB)
	for _, tc := range []struct {
		in   string
		want nvml.Return
	}{
		{"00000000:3B:00.0", nvml.SUCCESS}, // nvidia-smi's form
		{"0000:3b:00.0", nvml.SUCCESS},     // sysfs
		{"0:3b:0.0", nvml.SUCCESS},         // %x:%x:%x.%x
		{"0000:3B:00", nvml.SUCCESS},       // domain:bus:device
		{"3B:00.0", nvml.SUCCESS},          // bus:device.function
		{"0000:3c:00.0", nvml.ERROR_NOT_FOUND},
		{"0001:3b:00.0", nvml.ERROR_NOT_FOUND},
		{"zz:00.0", nvml.ERROR_INVALID_ARGUMENT},
		{"", nvml.ERROR_INVALID_ARGUMENT},
	} {
		d, r := s.DeviceGetHandleByPciBusId(tc.in)
		if r != tc.want || (r == nvml.SUCCESS && d != want) {
			t.Errorf("%q: %v, want %v", tc.in, r, tc.want)
		}
	}
}

// A GPU without vGPU types answers NOT_SUPPORTED; the library's calls on
// our handles reach the handle, as in the real library; ErrorString needs
// no library.
func TestOutsideModel(t *testing.T) {
	_, d := newMIG(t, ModelA100PCIe40GB)
	if _, r := d.GetSupportedVgpus(); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GetSupportedVgpus: %v", r)
	}
	s, _ := newMIG(t, ModelA100PCIe40GB)
	if got := s.ErrorString(nvml.ERROR_IN_USE); got != "ERROR_IN_USE" {
		t.Errorf("ErrorString = %q", got)
	}
}

// Tests drive one Server from many goroutines; -race checks the locking
// and the counts check that capacity holds under contention.
func TestConcurrentCreate(t *testing.T) {
	s, d := newMIG(t, ModelA100PCIe40GB)
	p := info(t, d, 19)
	var wg sync.WaitGroup
	var mu sync.Mutex
	made := 0
	for range 20 {
		wg.Go(func() {
			if _, r := d.CreateGpuInstance(p); r == nvml.SUCCESS {
				mu.Lock()
				made++
				mu.Unlock()
			}
			s.Instances(bus)
		})
	}
	wg.Wait()
	if made != 7 || len(s.Instances(bus)) != 7 {
		t.Fatalf("created %d, listed %d: want 7 x 1g.5gb", made, len(s.Instances(bus)))
	}
}

func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
