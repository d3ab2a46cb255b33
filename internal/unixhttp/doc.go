// Package unixhttp is HTTP over a unix socket: the transport of the
// clients of vgpud's API (pkg/client) and of vgpusim's control socket
// (fusefs.Client). Each maps errors and answers its own way.
package unixhttp
