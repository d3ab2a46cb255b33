package virttest

import "fmt"

// URI is libvirt's in-process mock driver: no daemon. Its state lives
// while a connection to it is open, so each test holds one.
const URI = "test:///default"

// Domain is a test-driver domain name (uuid) with a VNC password and an
// admin's own passthrough device (0000:41:00.0), neither of which vgpu may
// touch.
func Domain(name, uuid string) string {
	return fmt.Sprintf(`<domain type='test'>
  <name>%s</name>
  <uuid>%s</uuid>
  <memory unit='KiB'>1048576</memory>
  <os><type arch='x86_64'>hvm</type></os>
  <devices>
    <graphics type='vnc' port='-1' passwd='s3cret'/>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source><address domain='0x0000' bus='0x41' slot='0x00' function='0x0'/></source>
    </hostdev>
  </devices>
</domain>`, name, uuid)
}
