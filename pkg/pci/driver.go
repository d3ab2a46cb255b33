package pci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/vgpu-project/vgpu/internal/revert"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Errors callers branch on.
var (
	// ErrNoDevice: there is no such function under /sys/bus/pci/devices.
	ErrNoDevice = errors.New("no such PCI device")
	// ErrNoDriver: the driver is not registered with the PCI bus (module
	// not loaded), so a probe could never bind it.
	ErrNoDriver = errors.New("driver not loaded")
	// ErrBindTimeout: the probe was accepted but the device did not show up
	// on the driver in time.
	ErrBindTimeout = errors.New("device did not bind in time")
	// ErrClaimed: the probe bound the device to a driver other than the
	// one asked for.
	ErrClaimed = errors.New("claimed by another driver")
)

// Bind's bounded wait: sysfs binds are synchronous on the kernels we know,
// so the poll is a safety net for slow probes, not a schedule.
const (
	bindTimeout = 3 * time.Second
	bindPoll    = 20 * time.Millisecond
)

// DevicePath is the function's directory: /sys/bus/pci/devices/0000:03:00.0.
func DevicePath(a Address) string { return sysfs.PCIDevices + "/" + a.String() }

// DriverPath is a driver's directory: /sys/bus/pci/drivers/vfio-pci.
func DriverPath(driver string) string { return sysfs.PCIDrivers + "/" + driver }

// Exists reports whether the function exists.
func Exists(f sysfs.FS, a Address) (bool, error) {
	return sysfs.Exists(f, DevicePath(a))
}

func requireDevice(f sysfs.FS, a Address) error {
	ok, err := Exists(f, a)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w %s (no %s)", ErrNoDevice, a, DevicePath(a))
	}
	return nil
}

// CurrentDriver returns the driver bound to a, "" when unbound.
func CurrentDriver(f sysfs.FS, a Address) (string, error) {
	drv, ok, err := sysfs.LinkBase(f, DevicePath(a)+"/driver")
	if err != nil {
		return "", err
	}
	if !ok {
		// A missing link means unbound only if the device is there.
		if err := requireDevice(f, a); err != nil {
			return "", err
		}
		return "", nil
	}
	return drv, nil
}

// DriverOverride returns a's driver_override, "" when none (VFs print "(null)").
func DriverOverride(f sysfs.FS, a Address) (string, error) {
	s, err := sysfs.ReadString(f, DevicePath(a)+"/driver_override")
	if err != nil {
		return "", err
	}
	if s == "(null)" {
		return "", nil
	}
	return s, nil
}

// SetDriverOverride makes only driver eligible to bind a at its next probe;
// "" clears the override.
func SetDriverOverride(f sysfs.FS, a Address, driver string) error {
	p := DevicePath(a) + "/driver_override"
	// The trailing newline is what lets "" clear the override.
	if err := f.WriteFile(p, []byte(driver+"\n")); err != nil {
		return fmt.Errorf("set driver override %q for %s via %s: %w", driver, a, p, sysfs.Errno(err))
	}
	return nil
}

// Probe asks the PCI core to bind a to a matching driver (the override, if
// set). It does not wait; the kernel may bind nothing and still succeed.
func Probe(f sysfs.FS, a Address) error {
	if err := f.WriteFile(sysfs.PCIDriversProbe, []byte(a.String())); err != nil {
		return fmt.Errorf("probe %s via %s: %w", a, sysfs.PCIDriversProbe, sysfs.Errno(err))
	}
	return nil
}

// Unbind detaches a from its driver; an unbound device is left alone. On a
// real kernel vfio-pci's unbind blocks while a VFIO user holds the device.
func Unbind(f sysfs.FS, a Address) error {
	drv, err := CurrentDriver(f, a)
	if err != nil {
		return fmt.Errorf("unbind %s: %w", a, err)
	}
	if drv == "" {
		return nil
	}
	p := DriverPath(drv) + "/unbind"
	if err := f.WriteFile(p, []byte(a.String())); err != nil {
		return fmt.Errorf("unbind %s from %s via %s: %w", a, drv, p, sysfs.Errno(err))
	}
	return nil
}

// Bind moves a onto driver the way the kernel supports for every driver,
// vfio-pci included: unbind, driver_override, drivers_probe, then wait for
// the driver link. (new_id + bind fails with autoprobe off; docs/lab.md,
// "The differential test".)
// A device already on driver is left alone. On failure Bind tries to put
// back the previous driver and override, and says so if that fails too.
// The override stays set on success so a rescan cannot hand the device back
// to a host driver. Moving a PF off its vendor driver disables its VFs (the
// driver's remove does). Callers serialise operations on one device.
func Bind(ctx context.Context, f sysfs.FS, a Address, driver string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bind %s to %s: %w", a, driver, err)
	}
	if driver == "" {
		return fmt.Errorf("bind %s: no driver named (use Unbind to detach)", a)
	}
	if strings.ContainsAny(driver, "/\n") {
		return fmt.Errorf("bind %s: invalid driver name %q", a, driver)
	}
	cur, err := CurrentDriver(f, a)
	if err != nil {
		return fmt.Errorf("bind %s to %s: %w", a, driver, err)
	}
	if cur == driver {
		return nil
	}
	ok, err := sysfs.Exists(f, DriverPath(driver))
	if err != nil {
		return fmt.Errorf("bind %s to %s: %w", a, driver, err)
	}
	if !ok {
		return fmt.Errorf("bind %s to %s: %w: no %s (is the module loaded?)", a, driver, ErrNoDriver, DriverPath(driver))
	}
	oldOverride, err := DriverOverride(f, a)
	if err != nil {
		return fmt.Errorf("bind %s to %s: %w", a, driver, err)
	}

	if err := Unbind(f, a); err != nil {
		return fmt.Errorf("bind %s to %s: %w", a, driver, err)
	}
	var undo revert.List
	undo.Add("restoring it", func() error { return restore(ctx, f, a, cur, oldOverride) })
	fail := func(err error) error {
		return undo.Fail(fmt.Errorf("bind %s to %s: %w", a, driver, err))
	}
	if err := SetDriverOverride(f, a, driver); err != nil {
		return fail(err)
	}
	if err := Probe(f, a); err != nil {
		return fail(err)
	}
	if err := waitDriver(ctx, f, a, driver); err != nil {
		return fail(err)
	}
	undo.Success()
	return nil
}

// restore puts a back on driver prev (or leaves it unbound when prev is "")
// with its old override. The previous driver is bound through the override
// because its id table may not match a device that had an override.
func restore(ctx context.Context, f sysfs.FS, a Address, prev, override string) error {
	// The caller's context may be what failed; the undo gets its own time.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bindTimeout)
	defer cancel()
	now, err := CurrentDriver(f, a)
	if err != nil {
		return err
	}
	if now != prev {
		if err := Unbind(f, a); err != nil {
			return err
		}
		if prev != "" {
			if err := SetDriverOverride(f, a, prev); err != nil {
				return err
			}
			if err := Probe(f, a); err != nil {
				return err
			}
			if err := waitDriver(ctx, f, a, prev); err != nil {
				return fmt.Errorf("rebind %s to %s: %w", a, prev, err)
			}
		}
	}
	return SetDriverOverride(f, a, override)
}

// waitDriver polls a's driver link until it names driver, the bind timeout
// passes or ctx ends.
func waitDriver(ctx context.Context, f sysfs.FS, a Address, driver string) error {
	ctx, cancel := context.WithTimeout(ctx, bindTimeout)
	defer cancel()
	tick := time.NewTicker(bindPoll)
	defer tick.Stop()
	link := DevicePath(a) + "/driver"
	for {
		cur, err := CurrentDriver(f, a)
		if err != nil {
			return err
		}
		if cur == driver {
			return nil
		}
		if cur != "" {
			// Nothing moves a bound device by itself: no point waiting.
			return fmt.Errorf("%w %q (%s) instead of %s", ErrClaimed, cur, link, driver)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s still unbound (%s): %w", ErrBindTimeout, a, link, ctx.Err())
		case <-tick.C:
		}
	}
}

// ReadIDs returns a's vendor, device and class codes.
func ReadIDs(f sysfs.FS, a Address) (vendor, device uint16, class uint32, err error) {
	dir := DevicePath(a)
	v, err := sysfs.ReadUint(f, dir+"/vendor", 16)
	if err != nil {
		return 0, 0, 0, err
	}
	d, err := sysfs.ReadUint(f, dir+"/device", 16)
	if err != nil {
		return 0, 0, 0, err
	}
	c, err := sysfs.ReadUint(f, dir+"/class", 32)
	if err != nil {
		return 0, 0, 0, err
	}
	return uint16(v), uint16(d), uint32(c), nil
}

// NUMANode returns a's NUMA node, -1 when the host has none (the kernel
// prints -1, or the attribute is absent without CONFIG_NUMA).
func NUMANode(f sysfs.FS, a Address) (int, error) {
	p := DevicePath(a) + "/numa_node"
	n, err := sysfs.ReadInt(f, p)
	if errors.Is(err, fs.ErrNotExist) { // a kernel without NUMA
		return -1, nil
	}
	if err != nil {
		return -1, err
	}
	if n < 0 {
		return -1, nil
	}
	return int(n), nil
}
