// Package vgpu holds the nouns every layer of vgpu shares: a vGPU as the
// kernel shows it, how it reaches a VM (Kind), a vGPU that stops a change
// (Blocker), a GPU's PCI address, and what a carve is on (Target: a GPU
// or a virtual mdev parent) with the one parser of it. It imports only the
// standard library, so that the libvirt hook, the ledger and the allocator
// name a vGPU without linking the carver.
package vgpu
