// Package sysfstest holds test helpers over any sysfs.FS: a snapshot of the
// whole visible kernel state, and an FS wrapper that records writes.
package sysfstest
