package simnvml

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

// NVML prints a PCI address with an 8-digit upper-case domain
// ("00000000:3B:00.0"), sysfs (pci.Address.String) with a 4-digit
// lower-case one ("0000:3b:00.0").

// parsePCIAddr accepts what nvmlDeviceGetHandleByPciBusId_v2 accepts (nvml.h):
// domain:bus:device.function, domain:bus:device and bus:device.function, all
// hexadecimal, in either case.
func parsePCIAddr(s string) (pci.Address, error) {
	bad := fmt.Errorf("bad PCI address %q", s)
	parts := strings.Split(s, ":")
	var a pci.Address
	var last string
	switch len(parts) {
	case 3:
		d, err := strconv.ParseUint(parts[0], 16, 32)
		if err != nil {
			return pci.Address{}, bad
		}
		a.Domain = uint32(d)
		parts = parts[1:]
		last = parts[1]
	case 2:
		last = parts[1]
		if !strings.Contains(last, ".") {
			return pci.Address{}, bad // bus:device needs a function
		}
	default:
		return pci.Address{}, bad
	}
	b, err := strconv.ParseUint(parts[0], 16, 8)
	if err != nil {
		return pci.Address{}, bad
	}
	a.Bus = uint8(b)
	devStr, fnStr, hasFn := strings.Cut(last, ".")
	d, err := strconv.ParseUint(devStr, 16, 8)
	if err != nil || d > 0x1f {
		return pci.Address{}, bad
	}
	a.Device = uint8(d)
	if hasFn {
		f, err := strconv.ParseUint(fnStr, 16, 8)
		if err != nil || f > 7 {
			return pci.Address{}, bad
		}
		a.Function = uint8(f)
	}
	return a, nil
}

// nvmlBusID is the form nvmlPciInfo_t.busId holds (NVML_DEVICE_PCI_BUS_ID_FMT).
func nvmlBusID(a pci.Address) string {
	return fmt.Sprintf("%08X:%02X:%02X.%X", a.Domain, a.Bus, a.Device, a.Function)
}

// legacyBusID is nvmlPciInfo_t.busIdLegacy (NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT).
func legacyBusID(a pci.Address) string {
	return fmt.Sprintf("%04X:%02X:%02X.%X", a.Domain, a.Bus, a.Device, a.Function)
}
