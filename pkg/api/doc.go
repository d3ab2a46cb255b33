// Package api is vgpud's wire format, version 1: the routes of its HTTP/JSON
// API on a unix socket and the types they take and return. It holds no
// logic and imports no other package of vgpu: its types are the wire
// format's own, converted from the internal ones in one place
// (pkg/api/convert), so that a change inside vgpu cannot change the wire
// unnoticed (testdata/ pins it), and the libvirt hook links it (through
// pkg/client) without the rest.
//
// Every error answer is an Error with a 4xx or 5xx status. Requests are
// validated before vgpud changes anything: a 4xx means nothing was written.
package api
