// Package daemon is vgpud: the engine that brings the host to its config
// and hands out vGPUs (Engine, also used in process by vgpuctl apply when
// no vgpud runs), and the wiring around it (Daemon): the ledger, the API
// on a unix socket, signals, systemd notification and metrics.
package daemon
