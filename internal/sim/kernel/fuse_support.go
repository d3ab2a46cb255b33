package simkernel

// What the FUSE layer (internal/sim/kernel/fusefs) needs beyond sysfs.FS.

// Canonical returns the symlink-free path of p as writes and faults count
// it: the part that exists is resolved, the rest kept as written, so a path
// named before it exists (a VF not yet enabled) matches once it does.
func (k *Kernel) Canonical(p string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.canonical(p)
}
