// Package engine is what decides and changes on a host: it brings the host
// to its config (reconcile, repair at start), hands out vGPUs to domains
// and pods (reserve, lease, prepare, release, claim), collects those of
// domains that are gone, rebuilds the ledger from libvirt, and answers
// queries. Engine is one per host, shared by vgpud's front doors (the HTTP
// API in pkg/daemon, the kubelet's gRPC in pkg/deviceplugin); Local is the
// engine in process, for vgpuctl when no vgpud runs.
//
// It writes the kernel through pkg/carve and the kernel-op packages, and
// knows nothing of sockets, HTTP or systemd.
package engine
