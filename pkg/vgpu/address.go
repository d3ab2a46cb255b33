package vgpu

import (
	"fmt"
	"strconv"
	"strings"
)

// PCIAddress is a PCI function address: domain:bus:device.function. It
// names a GPU (and a VF) at every layer; pkg/pci, whose kernel operations
// take it, calls it pci.Address.
type PCIAddress struct {
	Domain   uint32
	Bus      uint8
	Device   uint8
	Function uint8
}

// ParsePCIAddress (pci.ParseAddress) accepts "0000:03:00.0" and the short
// "03:00.0" (domain 0), in either case, and rejects anything else with the
// reason, whitespace around it included: an address is a name (sysfs's,
// the admin's), and one read with its newline is a caller's mistake to
// report, not to mend.
func ParsePCIAddress(s string) (PCIAddress, error) {
	bad := func(why string) (PCIAddress, error) {
		return PCIAddress{}, fmt.Errorf("invalid PCI address %q: %s (want DDDD:BB:DD.F, e.g. 0000:03:00.0)", s, why)
	}
	if strings.TrimSpace(s) != s {
		return bad("whitespace around it")
	}
	var a PCIAddress
	parts := strings.Split(s, ":")
	switch len(parts) {
	case 2:
		parts = append([]string{"0000"}, parts...)
	case 3:
	default:
		return bad("wrong number of ':' separators")
	}
	if len(parts[0]) == 0 || len(parts[0]) > 8 {
		return bad("domain must be 1 to 8 hex digits")
	}
	d, err := strconv.ParseUint(parts[0], 16, 32)
	if err != nil {
		return bad("domain is not hex")
	}
	a.Domain = uint32(d)
	if len(parts[1]) != 2 {
		return bad("bus must be 2 hex digits")
	}
	b, err := strconv.ParseUint(parts[1], 16, 8)
	if err != nil {
		return bad("bus is not hex")
	}
	a.Bus = uint8(b)
	devfn := strings.Split(parts[2], ".")
	if len(devfn) != 2 || len(devfn[0]) != 2 || len(devfn[1]) != 1 {
		return bad("device.function must look like 00.0")
	}
	dv, err := strconv.ParseUint(devfn[0], 16, 8)
	if err != nil || dv > 0x1f {
		return bad("device must be hex 00 to 1f")
	}
	fn, err := strconv.ParseUint(devfn[1], 8, 8)
	if err != nil || fn > 7 {
		return bad("function must be 0 to 7")
	}
	a.Device, a.Function = uint8(dv), uint8(fn)
	return a, nil
}

// String is the canonical form sysfs uses: "0000:03:00.0".
// It is formatted by hand, one allocation: a listing of the host's vGPUs
// formats every VF's.
func (a PCIAddress) String() string {
	if a.Domain > 0xffff || a.Function > 0xf {
		return fmt.Sprintf("%04x:%02x:%02x.%x", a.Domain, a.Bus, a.Device, a.Function)
	}
	const hex = "0123456789abcdef"
	b := [12]byte{
		hex[a.Domain>>12&0xf], hex[a.Domain>>8&0xf], hex[a.Domain>>4&0xf], hex[a.Domain&0xf], ':',
		hex[a.Bus>>4], hex[a.Bus&0xf], ':',
		hex[a.Device>>4], hex[a.Device&0xf], '.',
		hex[a.Function],
	}
	return string(b[:])
}

// IsZero reports whether a is the zero address (unset).
func (a PCIAddress) IsZero() bool { return a == PCIAddress{} }

// Less orders addresses by domain, bus, device, function.
func (a PCIAddress) Less(b PCIAddress) bool {
	if a.Domain != b.Domain {
		return a.Domain < b.Domain
	}
	if a.Bus != b.Bus {
		return a.Bus < b.Bus
	}
	if a.Device != b.Device {
		return a.Device < b.Device
	}
	return a.Function < b.Function
}

// MarshalText implements encoding.TextMarshaler (JSON and YAML use it).
func (a PCIAddress) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *PCIAddress) UnmarshalText(b []byte) error {
	v, err := ParsePCIAddress(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}
