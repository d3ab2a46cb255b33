// Package inventory discovers the GPU physical functions of a host and what
// each can be split into, reading only through a sysfs.FS.
package inventory
