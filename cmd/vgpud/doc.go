// Command vgpud is the host agent: it brings the host's GPUs to
// /etc/vgpud/config.yaml at start, on SIGHUP and on vgpuctl apply, keeps
// the ledger of which vGPU serves which domain, and serves the API on a
// unix socket. It runs under systemd (Type=notify); see docs/agent.md.
package main
