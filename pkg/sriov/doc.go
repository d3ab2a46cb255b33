// Package sriov reads and changes a physical function's SR-IOV state:
// sriov_totalvfs, sriov_numvfs, the virtfnN and physfn links.
package sriov
