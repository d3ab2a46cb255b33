// Package attachtest holds test doubles for pkg/attach: vgpud's ledger in
// miniature behind attach.Reserver, and (cgo) a domain of libvirt's test
// driver to attach to, with a wrapper that makes one step fail.
package attachtest
