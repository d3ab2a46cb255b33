// Package alloc chooses free vGPUs for domains and records the choice in
// the ledger. The choice is made inside the ledger transaction that writes
// it, so concurrent callers (and bbolt allows one writer at a time) never
// hand one vGPU to two domains.
//
// The rules, in order: only vGPUs carrying the requested profile; not
// allocated, not under a live lease, not in use by anything else; on the
// requested NUMA node when one is given (strictly); then least-loaded
// parent GPU first (fewest allocations and leases), then by vGPU id.
package alloc
