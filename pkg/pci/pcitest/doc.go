// Package pcitest holds test helpers for what a PCI device held by a VM
// does to the kernel calls around it, shared by the packages whose calls
// meet it (mdev, sriov, carve) and by the fake kernel's own tests.
package pcitest
