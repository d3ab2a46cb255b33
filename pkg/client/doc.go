// Package client is the typed Go client of vgpud's API over its unix
// socket. Errors from vgpud carry the HTTP status and vgpud's message, and
// match the sentinels below with errors.Is where callers branch.
package client
