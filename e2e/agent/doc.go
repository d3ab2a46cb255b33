// Package agent holds the process-level tests of vgpud: the real vgpud
// binary runs as a daemon against vgpusim (the simulated host served over
// FUSE) and is restarted, killed with SIGKILL in the middle of its work,
// raced and fed bad requests over its socket. They need root and
// /dev/fuse, and fail saying so otherwise.
package agent
