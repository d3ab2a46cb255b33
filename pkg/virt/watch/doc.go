// Package watch is vgpud's read-only view of libvirt's domains, spoken in
// libvirt's own RPC protocol over its local socket (github.com/digitalocean/
// go-libvirt), pure Go: vgpud does not load libvirt's C library and the
// ~60 shared libraries it brings (about 15 MiB resident at rest) to ask
// which domains exist. Everything else that talks to libvirt goes through
// pkg/virt (which this package must not import: it links the C library).
package watch
