// Package importer turns another tool's description of a host's vGPUs into
// a vgpud host config (docs/config.md, docs/import.md), so that an admin can
// move a host over: mdevctl's persistent mdev definitions (Mdevctl) and
// NVIDIA vgpu-device-manager configs (VGPUDM). What maps to a profile is
// written as a config entry; what does not is named, one line each, never
// guessed.
package importer
