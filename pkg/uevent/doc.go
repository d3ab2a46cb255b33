// Package uevent listens to the kernel's device events (uevents) on its
// netlink socket: what udev hears when a device is added to or removed from
// a bus, or bound to or unbound from a driver. vgpud uses them to learn at
// once of changes made behind its back, such as a GPU falling off the bus.
package uevent
