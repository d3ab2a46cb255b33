// Package pci names PCI functions and performs the kernel's driver operations
// on them: driver_override, drivers_probe, bind and unbind.
package pci
