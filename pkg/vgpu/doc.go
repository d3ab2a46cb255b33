// Package vgpu holds the nouns every layer of vgpu shares: a vGPU as the
// kernel shows it, how it reaches a VM (Kind), and a vGPU that stops a
// change (Blocker). It imports only the standard library, so that the
// libvirt hook, the ledger and the allocator name a vGPU without linking
// the carver.
package vgpu
