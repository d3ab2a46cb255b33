package domxml

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/pkg/vgpu"
	"libvirt.org/go/libvirtxml"
)

// AliasPrefix starts the user alias vgpu gives a vGPU hostdev
// ("ua-vgpu0"): libvirt keeps user aliases ("ua-") in the persistent
// definition, so a <qemu:override> can name the device.
const AliasPrefix = "ua-vgpu"

// MigrationProps are the QEMU vfio-pci properties that let a vGPU migrate:
// enable-migration on, and device dirty-page tracking only where the driver
// has it (device); otherwise QEMU uses the container's (iommu) or counts
// every pinned page dirty (none). See docs/migration.md, "How it works".
func MigrationProps(dirtyTracking string) []libvirtxml.DomainQEMUOverrideProperty {
	track := "off"
	if dirtyTracking == "device" {
		track = "on"
	}
	return []libvirtxml.DomainQEMUOverrideProperty{
		{Name: "enable-migration", Type: "string", Value: "on"},
		{Name: "x-device-dirty-page-tracking", Type: "string", Value: track},
	}
}

// SetMigration gives each hostdev of the request's vGPUs in doc (a
// persistent definition) the user alias AliasPrefix+index and a QEMU
// override with props (nil: none), and drops the overrides of vgpu's
// aliases no hostdev carries any more. Other overrides are kept.
func SetMigration(doc []byte, r *Request, props []libvirtxml.DomainQEMUOverrideProperty) ([]byte, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(string(doc)); err != nil {
		return nil, fmt.Errorf("%w: read the domain XML: %w", ErrInvalid, err)
	}
	live := map[string]bool{}
	if d.Devices != nil && r != nil {
		for i := range d.Devices.Hostdevs {
			h := &d.Devices.Hostdevs[i]
			v, ok := VGPUOfHostdev(*h, i, vgpu.KindVF)
			if !ok {
				continue
			}
			rv, ok := r.Find(v.ID())
			if !ok {
				continue
			}
			alias := AliasPrefix + strconv.Itoa(rv.Index)
			h.Alias = &libvirtxml.DomainAlias{Name: alias}
			live[alias] = true
		}
	}
	var keep []libvirtxml.DomainQEMUOverrideDevice
	if d.QEMUOverride != nil {
		for _, o := range d.QEMUOverride.Devices {
			if !strings.HasPrefix(o.Alias, AliasPrefix) {
				keep = append(keep, o)
			}
		}
	}
	if props != nil {
		for a := range live {
			keep = append(keep, libvirtxml.DomainQEMUOverrideDevice{Alias: a, Frontend: libvirtxml.DomainQEMUOverrideFrontend{Properties: props}})
		}
	}
	d.QEMUOverride = nil
	if len(keep) > 0 {
		d.QEMUOverride = &libvirtxml.DomainQEMUOverride{Devices: keep}
	}
	out, err := d.Marshal()
	if err != nil {
		return nil, fmt.Errorf("write the domain XML: %w", err)
	}
	return []byte(out), nil
}
