// Package profiles is the built-in profile catalog: one YAML file per GPU
// model, in the schema of docs/profiles.md, read by pkg/profile.
package profiles

import "embed"

// FS holds every catalog file. It is compiled in so a host needs no files
// on disk to know the GPUs vgpu supports.
//
//go:embed *.yaml
var FS embed.FS
