// Package config is vgpud's host config, /etc/vgpud/config.yaml: which GPUs
// carry which profile, the API socket's group, what happens to a vGPU when
// its VM stops, and where metrics are served. The schema is versioned and
// decoded strictly (docs/config.md); Desired resolves it against the GPUs
// a host has.
package config
