package simnvml

import (
	"fmt"
	"strconv"
	"strings"
)

// pciAddr is a GPU's PCI address. NVML prints it with an 8-digit upper-case
// domain ("00000000:3B:00.0"); sysfs with a 4-digit lower-case one
// ("0000:3b:00.0").
type pciAddr struct {
	domain, bus, dev, fn uint32
}

// parsePCIAddr accepts what nvmlDeviceGetHandleByPciBusId_v2 accepts (nvml.h):
// domain:bus:device.function, domain:bus:device and bus:device.function, all
// hexadecimal, in either case.
func parsePCIAddr(s string) (pciAddr, error) {
	bad := fmt.Errorf("bad PCI address %q", s)
	parts := strings.Split(s, ":")
	var a pciAddr
	var last string
	switch len(parts) {
	case 3:
		d, err := strconv.ParseUint(parts[0], 16, 32)
		if err != nil {
			return pciAddr{}, bad
		}
		a.domain = uint32(d)
		parts = parts[1:]
		last = parts[1]
	case 2:
		last = parts[1]
		if !strings.Contains(last, ".") {
			return pciAddr{}, bad // bus:device needs a function
		}
	default:
		return pciAddr{}, bad
	}
	b, err := strconv.ParseUint(parts[0], 16, 8)
	if err != nil {
		return pciAddr{}, bad
	}
	a.bus = uint32(b)
	devStr, fnStr, hasFn := strings.Cut(last, ".")
	d, err := strconv.ParseUint(devStr, 16, 8)
	if err != nil || d > 0x1f {
		return pciAddr{}, bad
	}
	a.dev = uint32(d)
	if hasFn {
		f, err := strconv.ParseUint(fnStr, 16, 8)
		if err != nil || f > 7 {
			return pciAddr{}, bad
		}
		a.fn = uint32(f)
	}
	return a, nil
}

// nvml is the form nvmlPciInfo_t.busId holds (NVML_DEVICE_PCI_BUS_ID_FMT).
func (a pciAddr) nvml() string {
	return fmt.Sprintf("%08X:%02X:%02X.%X", a.domain, a.bus, a.dev, a.fn)
}

// legacy is nvmlPciInfo_t.busIdLegacy (NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT).
func (a pciAddr) legacy() string {
	return fmt.Sprintf("%04X:%02X:%02X.%X", a.domain, a.bus, a.dev, a.fn)
}

// sysfs is the name under /sys/bus/pci/devices.
func (a pciAddr) sysfs() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", a.domain, a.bus, a.dev, a.fn)
}

func (a pciAddr) less(b pciAddr) bool {
	if a.domain != b.domain {
		return a.domain < b.domain
	}
	if a.bus != b.bus {
		return a.bus < b.bus
	}
	if a.dev != b.dev {
		return a.dev < b.dev
	}
	return a.fn < b.fn
}
