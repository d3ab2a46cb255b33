// Package mdevctl reads the persistent mdev definitions of mdevctl
// (/etc/mdevctl.d/<parent>/<uuid>, JSON) as mdevctl itself reads them, and
// says which parents mdevctl fills on its own: it starts a definition with
// "start": "auto" from udev whenever its parent appears (60-mdevctl.rules,
// mdevctl start-parent-mdevs). vgpud shares no parent with it (Check).
package mdevctl
