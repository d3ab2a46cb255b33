// Package virttest holds what the tests of pkg/virt and of its users
// (pkg/attach's attachtest) share about libvirt's in-process test driver:
// its URI and a domain to define there. It imports nothing of pkg/virt,
// so pkg/virt's own tests can use it.
package virttest
