// Package clienttest serves vgpuds on unix sockets for the tests of
// vgpud's clients (pkg/client, vgpuctl) and of vgpud itself: Serve runs a
// vgpud in process until it answers; Vanishing serves a fake one with
// behaviour a real vgpud shows only when it dies, which in-process tests
// cannot make it do; RaceReserve races reserve/unreserve calls through a
// client.
package clienttest
