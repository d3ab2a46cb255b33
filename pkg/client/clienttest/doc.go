// Package clienttest serves fake vgpuds on unix sockets for the tests of
// vgpud's clients (pkg/client, vgpuctl): behaviour a real vgpud shows only
// when it dies, which in-process tests cannot make it do.
package clienttest
