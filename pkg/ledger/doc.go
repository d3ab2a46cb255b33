// Package ledger is vgpud's record of who holds what, an embedded bbolt
// store under /var/lib/vgpud: allocations (vGPU to domain), leases for
// incoming migrations, the original drivers of rebound devices, and an
// intent journal that lets a restart finish what a crash interrupted. Every
// change is one transaction (fsynced at commit), so a kill -9 leaves either
// the old state or the new one, never half of each.
package ledger
