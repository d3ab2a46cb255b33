// Package mdev manages VFIO mediated devices: parents under /sys/class/mdev_bus,
// their supported types, and instance create/remove.
package mdev
